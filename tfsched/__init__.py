"""tfsched: communication scheduling for parameter-server TensorFlow training.

The core (``tfsched.graph``, ``tfsched.oracle``, ``tfsched.ordering``, ``tfsched.sim``) works on
plain Python and networkx objects; TensorFlow is imported only at the edges.
"""

from tfsched.errors import TfschedError

__version__ = "0.1.0"
__all__ = ["TfschedError", "__version__"]
