"""The one error type of the search-space engine."""


class SearchSpaceError(ValueError):
    """Bad parameters or restrictions; the message names the culprit."""
