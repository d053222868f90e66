"""d3rlpy's Q-function modules and forwarders (``d3rlpy.models.torch.q_functions``)."""

from . import base, ensemble_q_function, iqn_q_function, mean_q_function, qr_q_function, utility
from .base import *  # noqa: F403 - each submodule's names, listed in its __all__
from .ensemble_q_function import *  # noqa: F403
from .iqn_q_function import *  # noqa: F403
from .mean_q_function import *  # noqa: F403
from .qr_q_function import *  # noqa: F403
from .utility import *  # noqa: F403

__all__ = [name for module in (base, ensemble_q_function, mean_q_function, qr_q_function, iqn_q_function, utility)
           for name in module.__all__]
