"""The Beam build's progress line (``electra_tf.data_prep.beam_progress``) from the jobs' report
files: sums over jobs, the finished count, the bad records named at the end, and a job's
reports written at most every 2 s but always when it ends."""

import io
import os

from electra_tf.data_prep import beam_progress
from electra_tf.data_prep.beam_inputs import BadRecords


def test_progress_line_sums_the_jobs_reports(tmp_path):
  folder = tmp_path / "progress"
  folder.mkdir()
  first = BadRecords(documents=3, count=1, messages=["a.jsonl:2: no text; skipped"])
  beam_progress.report_progress(str(folder), 0, first, tokens=40, done=True,
                                counts={"documents": 3})
  beam_progress.report_progress(str(folder), 1, BadRecords(documents=2), tokens=25, done=False)
  assert sorted(os.listdir(folder)) == ["job-0.json", "job-1.json"]  # no .part left
  out = io.StringIO()
  with beam_progress.ProgressLine(str(folder), 3, out, every_s=3600) as line:
    assert line.line() == "progress: 5 documents, 65 tokens done (1/3 jobs)"
  assert out.getvalue().splitlines() == [
    "warning: a.jsonl:2: no text; skipped",
    "progress: 5 documents, 65 tokens done (1/3 jobs)"]


def test_a_running_job_reports_at_most_every_two_seconds(tmp_path):
  bad = BadRecords(documents=1)
  beam_progress.report_progress(str(tmp_path), 7, bad, tokens=10, done=False)
  bad.documents = 2
  beam_progress.report_progress(str(tmp_path), 7, bad, tokens=20, done=False)  # too soon
  line = beam_progress.ProgressLine(str(tmp_path), 1, io.StringIO())
  assert line.line() == "progress: 1 documents, 10 tokens done (0/1 jobs)"
  beam_progress.report_progress(str(tmp_path), 7, bad, tokens=20, done=True)  # always
  assert line.line() == "progress: 2 documents, 20 tokens done (1/1 jobs)"
  beam_progress.report_progress(None, 8, bad, tokens=1, done=True)  # no folder: nothing
  assert os.listdir(tmp_path) == ["job-7.json"]
