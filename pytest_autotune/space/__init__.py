"""Search-space engine: parameters + restrictions -> valid configurations and queries on them."""
from .errors import SearchSpaceError
from .expressions import Restriction, compile_restriction, literal_values
from .searchspace import NEIGHBOUR_METHODS, SearchSpace

__all__ = ["SearchSpace", "SearchSpaceError", "Restriction", "compile_restriction", "literal_values",
           "NEIGHBOUR_METHODS"]
