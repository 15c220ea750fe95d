"""The one error type of the search-space engine."""
from ..errors import AutotuneError


class SearchSpaceError(AutotuneError, ValueError):
    """Bad parameters or restrictions; the message names the culprit."""
