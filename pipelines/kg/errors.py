"""Errors of the KG layer; messages name the file (and record) and say what is wrong."""


class KGSourceError(ValueError):
    """A KG source file that cannot be imported: missing, empty, malformed, or not UTF-8."""


class ArtifactMissingError(FileNotFoundError):
    """An artifact that a step needs has not been built yet."""
