"""Mutation adequacy on the change: could the suite tell the change's code from a slightly wrong one?

``python -m tools.vllm_mutants --vllm-overlay=DIR --base=BASE`` (CI: ``../shared/vllm-pr``
against ``../shared/vllm-pr-base``; ``tox -e mutants-vllm`` for the function scope):

- :mod:`~tools.vllm_mutants.discover`: what the change touched, in two scopes: the statements
  its diff adds or modifies (``--scope lines``, the default with ``--base``), or every statement
  of every function it changed (``--scope function``);
- :mod:`~tools.vllm_mutants.generate`: one-place mutants of those statements, made by the
  registry of :mod:`~tools.vllm_mutants.operators` (:data:`OPERATORS`) and written back as text
  by :mod:`~tools.vllm_mutants.splice`;
- :mod:`~tools.vllm_mutants.run`: a control run that records which test executes which line
  (coverage.py's dynamic contexts, :mod:`~tools.vllm_mutants.reach_plugin`), then each mutant
  against only the tests that reach it, ``-x``, through the fork server
  (:mod:`tools.forkserver`); shards (``--shard-id K --num-shards N``);
- :mod:`~tools.vllm_mutants.report`: the report per hunk, function and operator, and
  ``--merge`` of shard reports;
- :mod:`~tools.vllm_mutants.equivalent`: survivors no input can tell apart, with reasons.

Exit status 1 when a mutant that is not listed as equivalent survives or is a gap, a run
broke (control failed, timeout, error) or an equivalence entry names a killed mutant; 2 for
usage errors and an equivalence entry that matches no mutant of the overlay; else 0.
"""

from tools.vllm_mutants.discover import MutantError, changed_functions, installed_file
from tools.vllm_mutants.generate import OPERATORS, generate, sample, select

__all__ = ["OPERATORS", "MutantError", "changed_functions", "generate", "installed_file", "sample", "select"]
