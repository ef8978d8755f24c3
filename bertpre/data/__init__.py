"""The DATA folder: its layout and `load_data`; building it from a corpus (atomically); encoding."""
from bertpre.data.folder import DataFolder, load_data

__all__ = ["DataFolder", "load_data"]
