"""d3rlpy's torch implementation layer (``d3rlpy.models.torch``), on which
d3rlpy users write their own algorithms: encoders, policies returning
:class:`ActionOutput`, Q-functions returning :class:`QFunctionOutput` with
their "forwarders" and ensemble forwarders, action distributions, the
conditional VAE and imitation losses, value functions, learnable
parameters and Decision Transformer modules, with d3rlpy 2.8.1's module
paths, class names, constructor arguments and outputs.
:mod:`offrl.models.builders` builds them as d3rlpy's builders do.

The encoders are offrl's own (its factories return them; see
:mod:`offrl.models.torch.encoders`), and so are the Decision Transformer
networks under d3rlpy's signatures. The policies, Q-functions, VAE and
value function here are d3rlpy-shaped modules for code written against
d3rlpy; offrl's built-in algorithms keep their own networks (batched
critic ensembles, :mod:`offrl.models.policies`), which are faster and
whose model files do not change.
"""

from . import distributions, encoders, imitators, parameters, policies, q_functions, transformers, v_functions
from .distributions import *  # noqa: F403 - each submodule's names, listed in its __all__
from .encoders import *  # noqa: F403
from .imitators import *  # noqa: F403
from .parameters import *  # noqa: F403
from .policies import *  # noqa: F403
from .q_functions import *  # noqa: F403
from .transformers import *  # noqa: F403
from .v_functions import *  # noqa: F403

__all__ = [name for module in (distributions, encoders, imitators, parameters, policies, q_functions, transformers,
                               v_functions) for name in module.__all__]
