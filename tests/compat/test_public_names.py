"""docs/COMPATIBILITY.md's name lists against offrl, so the page cannot drift.

The page lists every public name of d3rlpy 2.8.1 (as offrl spells its
module) in exactly one of two fenced blocks: ``provided`` (must exist in
offrl) and ``missing`` (must not exist yet: once it does, move it). The set
of d3rlpy 2.8.1 names is frozen below (read from d3rlpy 2.8.1's modules:
``__all__`` where a module has one, else its public attributes that are not
submodules), so the test needs no d3rlpy.
"""

from __future__ import annotations

import importlib
import pathlib
import re
from typing import Dict, Set

import pytest

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "COMPATIBILITY.md"

#: d3rlpy 2.8.1's public names per module (offrl's module names)
D3RLPY_281: Dict[str, str] = {
    "offrl": """
        ActionSpace LoggingStrategy Modules PositionEncodingType TorchMiniBatch __version__ load_learnable
        seed
    """,
    "offrl.algos": """
        AWAC AWACConfig BC BCConfig BCQ BCQConfig BEAR BEARConfig CQL CQLConfig CRR CRRConfig CalQL
        CalQLConfig ConstantEpsilonGreedy DDPG DDPGConfig DQN DQNConfig DecisionTransformer
        DecisionTransformerConfig DiscreteBC DiscreteBCConfig DiscreteBCQ DiscreteBCQConfig DiscreteCQL
        DiscreteCQLConfig DiscreteDecisionTransformer DiscreteDecisionTransformerConfig DiscreteRandomPolicy
        DiscreteRandomPolicyConfig DiscreteSAC DiscreteSACConfig DoubleDQN DoubleDQNConfig Explorer
        GreedyTransformerActionSampler IQL IQLConfig IdentityTransformerActionSampler
        LinearDecayEpsilonGreedy NFQ NFQConfig NormalNoise PLAS PLASConfig PLASWithPerturbation
        PLASWithPerturbationConfig PRDC PRDCConfig QLearningAlgoBase QLearningAlgoImplBase RandomPolicy
        RandomPolicyConfig ReBRAC ReBRACConfig SAC SACConfig SoftmaxTransformerActionSampler
        StatefulTransformerWrapper TACR TACRConfig TD3 TD3Config TD3PlusBC TD3PlusBCConfig TQLearningConfig
        TQLearningImpl TorchTransformerInput TransformerActionSampler TransformerAlgoBase
        TransformerAlgoImplBase TransformerConfig TransformerInput assert_action_space_with_dataset
        assert_action_space_with_env
    """,
    "offrl.dataset": """
        BasicTrajectorySlicer BasicTransitionPicker BasicWriterPreprocess BufferProtocol DATASET_VERSION
        DatasetInfo Episode EpisodeBase EpisodeGenerator EpisodeGeneratorProtocol ExperienceWriter
        FIFOBuffer FrameStackTrajectorySlicer FrameStackTransitionPicker InfiniteBuffer
        LastFrameWriterPreprocess MDPDataset MixedReplayBuffer MultiStepTransitionPicker PartialTrajectory
        ReplayBuffer ReplayBufferBase Signature SparseRewardTransitionPicker TrajectoryMiniBatch
        TrajectorySlicerProtocol Transition TransitionMiniBatch TransitionPickerProtocol
        WriterPreprocessProtocol batch_pad_array batch_pad_observations cast_flat_shape cast_recursively
        cast_tuple_shape check_dtype check_non_1d_array create_fifo_replay_buffer
        create_infinite_replay_buffer create_zero_observation detect_action_size_from_env
        detect_action_space detect_action_space_from_env dump get_axis_size get_batch_dim
        get_dtype_from_observation get_dtype_from_observation_sequence get_shape_from_observation
        get_shape_from_observation_sequence is_tuple_shape load load_v1 retrieve_observation
        slice_observations stack_observations stack_recent_observations
    """,
    "offrl.datasets": """
        CARTPOLE_RANDOM_URL CARTPOLE_URL DATA_DIRECTORY DROPBOX_URL PENDULUM_RANDOM_URL PENDULUM_URL
        get_atari get_atari_transitions get_cartpole get_d4rl get_dataset get_pendulum
    """,
    "offrl.envs": """
        Atari AtariPreprocessing ChannelFirst FrameStack GoalConcatWrapper seed_env
    """,
    "offrl.logging": """
        CombineAdapter CombineAdapterFactory D3RLPyLogger FileAdapter FileAdapterFactory LOG LoggerAdapter
        LoggerAdapterFactory NoopAdapter NoopAdapterFactory TensorboardAdapter TensorboardAdapterFactory
        WanDBAdapter WanDBAdapterFactory set_log_context
    """,
    "offrl.metrics": """
        AverageValueEstimationEvaluator CompareContinuousActionDiffEvaluator
        CompareDiscreteActionMatchEvaluator ContinuousActionDiffEvaluator DiscountedSumOfAdvantageEvaluator
        DiscreteActionMatchEvaluator EnvironmentEvaluator EvaluatorProtocol
        InitialStateValueEstimationEvaluator SoftOPCEvaluator TDErrorEvaluator
        evaluate_qlearning_with_environment evaluate_transformer_with_environment make_batches
    """,
    "offrl.models": """
        DefaultEncoderFactory EncoderFactory IQNQFunctionFactory MeanQFunctionFactory PixelEncoderFactory
        QFunctionFactory QRQFunctionFactory SimBaEncoderFactory VectorEncoderFactory
        create_categorical_policy create_continuous_decision_transformer create_continuous_q_function
        create_deterministic_policy create_deterministic_residual_policy
        create_discrete_decision_transformer create_discrete_q_function create_normal_policy
        create_parameter create_vae_decoder create_vae_encoder create_value_function make_encoder_field
        make_q_func_field register_encoder_factory
    """,
    "offrl.ope": """
        DiscreteFQE FQE FQEConfig
    """,
    "offrl.optimizers": """
        AdamFactory AdamWFactory CosineAnnealingLRFactory GPTAdamWFactory LRSchedulerFactory
        OptimizerFactory OptimizerWrapper RMSpropFactory SGDFactory WarmupSchedulerFactory
        make_lr_scheduler_field make_optimizer_field register_optimizer_factory
    """,
    "offrl.preprocessing": """
        ActionScaler ClipRewardScaler ConstantShiftRewardScaler MinMaxActionScaler MinMaxObservationScaler
        MinMaxRewardScaler MultiplyRewardScaler ObservationScaler PixelObservationScaler
        ReturnBasedRewardScaler RewardScaler Scaler StandardObservationScaler StandardRewardScaler
        TupleObservationScaler add_leading_dims add_leading_dims_numpy make_action_scaler_field
        make_observation_scaler_field make_reward_scaler_field register_action_scaler
        register_observation_scaler register_reward_scaler
    """,
    "offrl.types": """
        DType Float32NDArray GymEnv Int32NDArray NDArray Observation ObservationSequence
        OptimizerWrapperProto Shape TorchObservation UInt8NDArray
    """,
    "offrl.constants": """
        ALGO_NOT_GIVEN_ERROR ActionSpace CONTINUOUS_ACTION_SPACE_MISMATCH_ERROR
        DISCRETE_ACTION_SPACE_MISMATCH_ERROR IMPL_NOT_INITIALIZED_ERROR PositionEncodingType
    """,
}


def _block(kind: str) -> Dict[str, Set[str]]:
    """The ``module: name name ...`` lines of the fenced block ```<kind>."""
    text = DOC.read_text(encoding="utf-8")
    match = re.search(r"^```" + kind + r"\n(.*?)^```", text, flags=re.S | re.M)
    if match is None:
        raise ValueError(f"{DOC} has no ```{kind} block")
    out: Dict[str, Set[str]] = {}
    for line in match.group(1).splitlines():
        if not line.strip():
            continue
        module, _, names = line.partition(":")
        out.setdefault(module.strip(), set()).update(names.split())
    return out


def _d3rlpy() -> Dict[str, Set[str]]:
    return {module: set(names.split()) for module, names in D3RLPY_281.items()}


def test_every_d3rlpy_name_is_listed_exactly_once() -> None:
    provided, missing = _block("provided"), _block("missing")
    for module, names in _d3rlpy().items():
        have, lack = provided.get(module, set()), missing.get(module, set())
        assert not (have & lack), f"{module}: listed as both provided and missing: {sorted(have & lack)}"
        assert names - have - lack == set(), f"{module}: d3rlpy names not listed in {DOC.name}: {sorted(names - have - lack)}"
        assert (have | lack) - names == set(), f"{module}: listed but not d3rlpy 2.8.1 names: {sorted((have | lack) - names)}"


@pytest.mark.parametrize("module", sorted(D3RLPY_281))
def test_provided_names_exist(module) -> None:
    mod = importlib.import_module(module)
    absent = sorted(n for n in _block("provided").get(module, ()) if not hasattr(mod, n))
    assert absent == [], f"{DOC.name} says {module} provides {absent}"


@pytest.mark.parametrize("module", sorted(D3RLPY_281))
def test_missing_names_are_still_missing(module) -> None:
    mod = importlib.import_module(module)
    present = sorted(n for n in _block("missing").get(module, ()) if hasattr(mod, n))
    assert present == [], f"{module} now has {present}: move them to the provided list of {DOC.name}"


def test_documented_module_paths_import() -> None:
    # d3rlpy module paths the page says offrl provides
    for path in ("offrl.algos.qlearning", "offrl.algos.transformer", "offrl.models.encoders",
                 "offrl.models.q_functions", "offrl.preprocessing.observation_scalers",
                 "offrl.preprocessing.action_scalers", "offrl.preprocessing.reward_scalers",
                 "offrl.metrics.evaluators", "offrl.ope.fqe", "offrl.logging.file_adapter", "offrl.logging.wandb_adapter",
                 "offrl.optimizers.lr_schedulers", "offrl.dataset.replay_buffer", "offrl.envs.wrappers"):
        importlib.import_module(path)


@pytest.mark.parametrize(
    "path,names",
    [
        ("buffers", "BufferProtocol InfiniteBuffer FIFOBuffer"),
        ("components", "Signature Transition PartialTrajectory EpisodeBase Episode DatasetInfo"),
        ("mini_batch", "TransitionMiniBatch TrajectoryMiniBatch"),
        ("transition_pickers", "TransitionPickerProtocol BasicTransitionPicker SparseRewardTransitionPicker "
                               "FrameStackTransitionPicker MultiStepTransitionPicker"),
        ("trajectory_slicers", "TrajectorySlicerProtocol BasicTrajectorySlicer FrameStackTrajectorySlicer"),
        ("writers", "WriterPreprocessProtocol BasicWriterPreprocess LastFrameWriterPreprocess ExperienceWriter"),
        ("compat", "MDPDataset"),
    ],
)
def test_d3rlpy_dataset_module_paths(path, names) -> None:
    # d3rlpy 2.8.1's d3rlpy.dataset.<path> modules and their __all__: the same objects as offrl.dataset's
    import offrl.dataset

    module = importlib.import_module(f"offrl.dataset.{path}")
    assert sorted(module.__all__) == sorted(names.split())
    for name in names.split():
        assert getattr(module, name) is getattr(offrl.dataset, name)
