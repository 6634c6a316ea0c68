"""``--hparams`` read as the official scripts read it (``electra_tf.hparams_input``): a JSON
literal, a ``.json`` file or a shipped preset; one-line errors."""

import pytest

from electra_tf.hparams_input import PRESETS_DIR, load_hparams, preset_path


def test_load_hparams_forms(tmp_path):
  assert load_hparams(None) == {} and load_hparams("  ") == {}
  assert load_hparams('{"debug": true, "mask_prob": 0.2}') == {"debug": True, "mask_prob": 0.2}
  given = {"model_hparam_overrides": {"hidden_size": 64}}
  loaded = load_hparams(given)
  assert loaded == given and loaded is not given
  path = tmp_path / "h.json"
  path.write_text('{"model_size": "base"}')
  assert load_hparams(str(path)) == {"model_size": "base"}


@pytest.mark.parametrize("text, words", [
  ("{'debug': true}", ["--hparams", "not valid JSON"]),
  ("[1, 2]", ["JSON object", "list"]),
  ("missing.json", ["missing.json"]),
])
def test_load_hparams_errors(tmp_path, text, words):
  with pytest.raises(ValueError) as info:
    load_hparams(text)
  assert "\n" not in str(info.value)
  for word in words:
    assert word in str(info.value)


def test_load_hparams_bad_file(tmp_path):
  path = tmp_path / "bad.json"
  path.write_text('{"debug": tru')
  with pytest.raises(ValueError, match=f"hparams file {path} is not valid JSON"):
    load_hparams(str(path))


def test_a_preset_name_finds_the_shipped_file(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  path = preset_path("electra_small")
  assert path == preset_path("electra_small.json") == f"{PRESETS_DIR}/electra_small.json"
  assert load_hparams("electra_small") == load_hparams(path)
  (tmp_path / "electra_small.json").write_text("{}")
  assert preset_path("electra_small.json") is None  # an existing file wins
  assert preset_path("no_such_preset") is None
