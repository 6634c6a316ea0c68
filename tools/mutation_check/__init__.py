"""Mutation check: plausible porting mistakes, each applied to a scratch copy of the repository,
must make a golden-lane test fail (``python -m tools.mutation_check``)."""
