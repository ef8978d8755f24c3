"""One config system for every command: rules (each range once), sections typed from their
annotations, loading (YAML, --set, presets), the pretraining run's config and fine-tuning's."""
from bertpre.config.loading import resolve_config_path
from bertpre.config.rules import (
    MAX_BATCH,
    MAX_SEED,
    MAX_SEQ_LENGTH,
    RULES,
    Range,
    check_number,
    integers,
    numbers,
)
from bertpre.config.run import (
    check_phase_lengths,
    check_world_size,
    load_config,
    no_pair_head,
    refuse_phase_model_keys,
    resolve,
)
from bertpre.config.sections import (
    DEVICES,
    PHASE_KEYS,
    SECTIONS,
    WSD_DEFAULTS,
    Config,
    DataConfig,
    OptimConfig,
    PhaseConfig,
    TrainConfig,
)
from bertpre.configs import preset_names

__all__ = [
    "DEVICES", "MAX_BATCH", "MAX_SEED", "MAX_SEQ_LENGTH", "PHASE_KEYS", "RULES", "SECTIONS", "WSD_DEFAULTS", "Config",
    "DataConfig", "OptimConfig", "PhaseConfig", "Range", "TrainConfig", "check_number", "check_phase_lengths", "check_world_size",
    "integers", "load_config", "no_pair_head", "numbers", "preset_names", "refuse_phase_model_keys", "resolve", "resolve_config_path",
]
