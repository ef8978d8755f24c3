"""Shared test set-up. pytest puts this folder on sys.path, so the helper modules beside this
file (`_tiny_data`, `_tokenize_helpers`) import by name from any test folder."""
