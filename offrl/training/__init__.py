"""The machinery that runs algorithms, a floor below :mod:`offrl.algos`
(it imports nothing from it): the offline loop (:mod:`offrl.training.fit`:
``fitter``, loss tracking, checkpoints each epoch), the online loop and data
collection (:mod:`offrl.training.online`), checkpoints and resume
(:mod:`offrl.training.checkpoint`), data-parallel training under torchrun
(:mod:`offrl.training.distributed`), compiled update steps
(:mod:`offrl.training.graph`), device parsing (:mod:`offrl.training.device`),
explorers (:mod:`offrl.training.explorers`) and hooks
(:mod:`offrl.training.hooks`). It talks to an algorithm only through the
documented interface of :class:`offrl.algos.QLearningAlgoBase` (a training
step, capability flags, state for saving)."""
