"""The exception for corpus problems a user can fix (missing path, empty corpus, bad format)."""


class CorpusError(Exception):
    """A corpus cannot be read as given. The bertpre CLI prints it as one line and exits 2."""
