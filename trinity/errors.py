"""The project's base error: every user-facing failure is a TrinityError with one clear message."""


class TrinityError(Exception):
    """A failure the user can act on; the CLI prints its message without a traceback."""


class ConfigError(TrinityError):
    """Invalid configuration, reported before any work starts."""


class AssetError(TrinityError):
    """A local model file could not be assembled or failed its checksum."""


class DiskSpaceError(TrinityError):
    """Too little free disk space for what set-up or a stage is about to write."""
