"""``PipelineSettingsError`` names its first bad field, as every ``ConfigError`` does. No Spark."""

from __future__ import annotations

import pytest

from laneway.spark.settings import PipelineSettings, PipelineSettingsError


def _settings(**kw: object) -> PipelineSettings:
    base: dict[str, object] = {"bootstrap": "b:9092", "warehouse": "/w", "checkpoint": "/c"}
    return PipelineSettings(**{**base, **kw})  # type: ignore[arg-type]


def test_a_pipeline_settings_error_names_its_first_bad_field() -> None:
    # .field was "PipelineSettings" whatever the problems; str() began "PipelineSettings: "
    with pytest.raises(PipelineSettingsError) as info:
        _settings(bootstrap=" ", compact_every=-1)
    err = info.value
    assert err.problems == [("bootstrap", "must not be empty"), ("compact_every", "must be >= 0, got -1")]
    assert (err.field, err.reason) == ("bootstrap", "must not be empty")
    assert str(err) == "bootstrap: must not be empty; compact_every: must be >= 0, got -1"  # each once
    with pytest.raises(PipelineSettingsError) as info:  # a field of the wrong type
        _settings(topic=None)
    assert info.value.field == "topic" and str(info.value) == "topic: must be a str, got None"


def test_a_pipeline_settings_error_of_no_problem_still_says_something() -> None:
    err = PipelineSettingsError([])
    assert err.problems == [] and err.field == "PipelineSettings" and str(err)
