"""The DATA folder: its layout and `load_data`; building it from a corpus (atomically); encoding."""
from bertpre.data.folder import DataFolder, load_data
from bertpre.data.mixture import DataMixture, load_mixture, open_data

__all__ = ["DataFolder", "DataMixture", "load_data", "load_mixture", "open_data"]
