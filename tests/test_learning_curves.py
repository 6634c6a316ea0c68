"""Learning curves read back from real TensorBoard event files, plotted and tabulated."""

import pytest
import tensorflow as tf

from electra_tf import learning_curves


def _write_run(model_dir, steps=(10, 20, 30, 40, 50, 60, 70)):
  writer = tf.summary.create_file_writer(str(model_dir))
  with writer.as_default():
    for s in steps:
      tf.summary.scalar("mlm_loss", 10.0 - s / 10, step=s)
      tf.summary.scalar("disc_loss", 0.5 - s / 1000, step=s)
      tf.summary.scalar("disc_auc", 0.5 + s / 200, step=s)
      tf.summary.scalar("disc_recall", s / 100, step=s)
      tf.summary.scalar("masked_lm_accuracy", s / 400, step=s)
  writer.close()
  eval_writer = tf.summary.create_file_writer(str(model_dir / "eval"))
  with eval_writer.as_default():
    tf.summary.scalar("disc_auc", 0.81, step=steps[-1])
  eval_writer.close()


def test_read_table_and_png(tmp_path):
  _write_run(tmp_path)
  train = learning_curves.read_scalars(str(tmp_path))
  assert [s for s, _ in train["mlm_loss"]] == [10, 20, 30, 40, 50, 60, 70]
  assert abs(dict(train["disc_auc"])[70] - 0.85) < 1e-6
  table = learning_curves.text_table(train, rows=5).splitlines()
  assert len(table) == 6  # header + 5 rows, first and last step included
  assert table[1].split()[0] == "10" and table[-1].split()[0] == "70"
  assert table[0].split() == ["step", "mlm_loss", "disc_loss", "masked_lm_accuracy",
                              "disc_auc", "disc_recall"]
  evaluation = learning_curves.read_scalars(str(tmp_path / "eval"))
  png = tmp_path / "curves.png"
  learning_curves.plot(train, evaluation, str(png))
  assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def _write_probe(model_dir, task="topic", steps=(20, 40, 70)):
  writer = tf.summary.create_file_writer(str(model_dir))
  with writer.as_default():
    for s in steps:
      for name, value in (("cls", 0.3 + s / 1000), ("mean", 0.5 + s / 500),
                          ("random_init", 0.52), ("random_init_spread", 0.02)):
        tf.summary.scalar(f"probe/{task}/{name}", value, step=s)
  writer.close()


def _overlaps(a, b) -> bool:
  return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def test_every_panel_has_a_y_label_and_its_legend_clear_of_the_curves(tmp_path):
  _write_run(tmp_path)
  train = learning_curves.read_scalars(str(tmp_path))
  evaluation = learning_curves.read_scalars(str(tmp_path / "eval"))
  assert learning_curves.probe_tasks(train) == []
  fig = learning_curves.figure(train, evaluation)
  assert len(fig.axes) == 2
  _write_probe(tmp_path)
  train = learning_curves.read_scalars(str(tmp_path))
  assert learning_curves.probe_tasks(train) == ["topic"]
  fig = learning_curves.figure(train, evaluation)
  assert len(fig.axes) == 3  # the probe's panel
  renderer = fig.canvas.get_renderer()
  for ax in fig.axes:
    assert ax.get_ylabel()
    legend = ax.get_legend()
    assert legend is not None and legend.get_texts()
    assert not _overlaps(legend.get_window_extent(renderer), ax.get_window_extent(renderer))
  probe_panel = fig.axes[2]
  assert [t.get_text() for t in probe_panel.get_legend().get_texts()] == [
      "[CLS]", "mean-pooled", "random init (0.520 ± 0.020)"]
  band = probe_panel.patches[0]  # the reference +- its spread, in data coordinates
  corners = probe_panel.transData.inverted().transform(
      band.get_transform().transform(band.get_path().vertices))
  assert (corners[:, 1].min(), corners[:, 1].max()) == pytest.approx((0.50, 0.54))
  png = tmp_path / "probe.png"
  learning_curves.plot(train, evaluation, str(png))
  assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_missing_events_is_one_line(tmp_path, capsys):
  import pytest

  with pytest.raises(SystemExit) as e:
    learning_curves.main(["--model_dir", str(tmp_path)])
  assert str(e.value) == f"learning_curves: error: no TensorBoard event files in {tmp_path}"
