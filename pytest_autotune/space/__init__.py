"""Search-space engine: parameters + restrictions -> valid configurations and queries on them."""
from .build import DEFAULT_MAX_CONFIGURATIONS, SearchSpaceTooLarge
from .errors import SearchSpaceError
from .expressions import Restriction, compile_restriction, literal_values
from .searchspace import NEIGHBOUR_METHODS, SearchSpace, check_params

__all__ = ["SearchSpace", "SearchSpaceError", "SearchSpaceTooLarge", "DEFAULT_MAX_CONFIGURATIONS", "Restriction",
           "compile_restriction", "literal_values", "check_params", "NEIGHBOUR_METHODS"]
