"""``python -m tools.mutation_check [--only NAME[,NAME]] [--list] [--keep]``.

Runs the mutants' test selections once unmutated (stops with one line if that is red), then each
mutant in its own scratch copy, one at a time; prints one line per mutant and finally
``mutants: N/M caught (public lane)``. Exit 0 only when every mutant is caught.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from tools.mutation_check import runner
from tools.mutation_check.mutants import MUTANTS, Mutant


def select(only: str | None, table: Sequence[Mutant] = MUTANTS) -> list[Mutant]:
  """The mutants of ``table`` named in ``only`` (comma-separated), all by default."""
  if not only:
    return list(table)
  wanted = [name.strip() for name in only.split(",") if name.strip()]
  known = {m.name: m for m in table}
  unknown = [name for name in wanted if name not in known]
  if unknown:
    raise SystemExit(f"mutation_check: unknown mutant {', '.join(unknown)} (see --list)")
  return [known[name] for name in wanted]


def describe(mutant: Mutant, root: Path = runner.ROOT) -> str:
  """One line: name, the mistake, the target file, the tests."""
  target = runner.find_target(mutant, root)
  where = target.relative_to(root) if target else "(code not found)"
  return f"{mutant.name:<26} {mutant.what}  [{where}; {' '.join(mutant.tests)}]"


def baseline(mutants: list[Mutant], root: Path = runner.ROOT) -> str | None:
  """None when the union of the selections passes unmutated, else one line saying why not."""
  tree = Path(tempfile.mkdtemp(prefix="mutation_check_baseline_"))
  try:
    runner.copy_tree(tree, root)
    args = runner.union_args(mutants)
    code, detail = runner.run_pytest(tree, args)
  finally:
    shutil.rmtree(tree, ignore_errors=True)
  if code == 0:
    print(f"baseline green: {detail}", flush=True)
    return None
  return f"mutation_check: the unmutated baseline is not green ({detail}): fix it first"


def main(argv: list[str] | None = None, table: Sequence[Mutant] = MUTANTS,
         root: Path = runner.ROOT) -> int:
  """The command; ``table`` and ``root`` (the repository copied) are for tests."""
  parser = argparse.ArgumentParser(prog="python -m tools.mutation_check", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--only", help="comma-separated mutant names (default: all)")
  parser.add_argument("--list", action="store_true", help="print the table and exit")
  parser.add_argument("--keep", action="store_true", help="keep each mutant's scratch copy")
  parser.add_argument("--no_baseline", action="store_true", help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  mutants = select(args.only, table)
  if args.list:
    for mutant in mutants:
      print(describe(mutant, root))
    return 0
  if not args.no_baseline:
    problem = baseline(mutants, root)
    if problem:
      print(problem)
      return 2
  caught = 0
  for mutant in mutants:
    verdict, detail = runner.run_mutant(mutant, keep=args.keep, root=root)
    if verdict == "missing":
      print(f"mutant {mutant.name}: {detail}", flush=True)
    else:
      print(f"{verdict:<8} {mutant.name:<26} {detail}", flush=True)
    caught += verdict == "caught"
  print(f"mutants: {caught}/{len(mutants)} caught (public lane)")
  return 0 if caught == len(mutants) else 1


if __name__ == "__main__":
  sys.exit(main())
