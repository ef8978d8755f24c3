"""The config system: YAML → typed, validated sections; `--set` overrides; presets."""
from bertpre.config.loading import (
    DEVICES,
    MAX_BATCH,
    MAX_SEED,
    MAX_SEQ_LENGTH,
    NULLABLE,
    RULES,
    SECTIONS,
    Config,
    DataConfig,
    OptimConfig,
    check_number,
    check_world_size,
    integers,
    load_config,
    numbers,
    preset_names,
    resolve,
    resolve_config_path,
)

__all__ = [
    "DEVICES", "MAX_BATCH", "MAX_SEED", "MAX_SEQ_LENGTH", "NULLABLE", "RULES", "SECTIONS", "Config",
    "DataConfig", "OptimConfig", "check_number", "check_world_size", "integers", "load_config",
    "numbers", "preset_names", "resolve", "resolve_config_path",
]
