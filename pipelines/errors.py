"""Errors a user can fix: bad input files, params or project state. Every message names the file (and
record or key) and says what is wrong; the CLI prints it as one line and exits 2 (``OmneError``)."""


class OmneError(Exception):
    """Base of the errors caused by the user's input or project state, not by a bug."""


class ConfigError(OmneError, ValueError):
    """A params file that cannot be used; the message names the file and the offending key."""


class RegistryError(OmneError, ValueError):
    """The registry file is missing, malformed, or does not name the requested domain."""


class KGSourceError(OmneError, ValueError):
    """A KG source file that cannot be imported: missing, empty, malformed, or not UTF-8."""


class ArtifactMissingError(OmneError, FileNotFoundError):
    """An artifact that a step needs has not been built yet."""


class LineageError(OmneError, ValueError):
    """A path that is not (inside) an artifact: no manifest.json in it or in any folder above it."""
