"""The exception for problems a user can fix: bad input, bad configuration."""


class UserError(Exception):
    """Bad input or configuration. The CLI prints its message as one line and exits with code 2."""
