"""Paper 06: Sudoku by trial and error.

*Teaching Transformers to Solve Combinatorial Problems through Efficient Trial & Error*
(Giannoulis, Pantis, Tzamos), NeurIPS 2025, arXiv 2509.22023; official code
https://github.com/gpt-reasoning/ReasoningCombinatorials.

Modules (the notebook is ``notebooks/06_sudoku_dfs.ipynb``, the GPU study ``python -m companion.bench sudoku_dfs``):

* :mod:`~companion.sudoku_dfs.board` - boards, the 1001-token vocabulary, the statuses, input checks;
* :mod:`~companion.sudoku_dfs.solver` - sequential rules (naked/hidden singles), the DFS transcript
  generator with multi-target labels, the exact search and solution counter;
* :mod:`~companion.sudoku_dfs.replay` - replaying transcripts, the DFS tree, the transcript verifier, the
  transcript grammar used for constrained decoding;
* :mod:`~companion.sudoku_dfs.rules` - the batched bitmask rule engine (numpy on the CPU, torch on the GPU);
* :mod:`~companion.sudoku_dfs.generator` - the paper's puzzle recipe, symmetries and their classes, puzzle files;
* :mod:`~companion.sudoku_dfs.backdoors` - backdoors and the two guessing oracles;
* :mod:`~companion.sudoku_dfs.mssc` - contextual Min-Sum Set Cover (App. E: Example E.1, Theorem E.2);
* :mod:`~companion.sudoku_dfs.policy` - the one-level guess policy trained with L1 or L2;
* :mod:`~companion.sudoku_dfs.model` (the GPT-2 builder), :mod:`~companion.sudoku_dfs.data` (padded
  transcripts, symmetry augmentation), :mod:`~companion.sudoku_dfs.loss` (the multi-target losses),
  :mod:`~companion.sudoku_dfs.training`, :mod:`~companion.sudoku_dfs.decoding` (greedy and
  grammar-constrained decoding, accuracies), :mod:`~companion.sudoku_dfs.checkpoints`;
* :mod:`~companion.sudoku_dfs.claims` - the claims table; :mod:`~companion.sudoku_dfs.scale` - the
  one-GPU study and its recorded results, its stages in :mod:`~companion.sudoku_dfs.study` (no plotly);
* :mod:`~companion.sudoku_dfs.explorer` - the DFS-trace explorer, :mod:`~companion.sudoku_dfs.figures` -
  the other figures (plotly, ipywidgets; notebook only).
"""

from companion.core import Paper
from companion.sudoku_dfs.board import (
    DEAD_END,
    GUESS,
    PAD,
    SOLVED,
    START,
    THINK,
    VOCAB_SIZE,
    Status,
    StepLimitExceeded,
    SudokuError,
    format_board,
    move_token,
    parse_board,
    token_name,
)
from companion.sudoku_dfs.solver import Transcript, count_solutions, dfs_transcript, solutions, unique_solution

PAPER = Paper(
    number="06",
    slug="sudoku_dfs",
    title="Teaching Transformers to Solve Combinatorial Problems through Efficient Trial & Error",
    arxiv="2509.22023",
    code="https://github.com/gpt-reasoning/ReasoningCombinatorials",
)

__all__ = [
    "DEAD_END",
    "GUESS",
    "PAD",
    "PAPER",
    "SOLVED",
    "START",
    "THINK",
    "VOCAB_SIZE",
    "Status",
    "StepLimitExceeded",
    "SudokuError",
    "Transcript",
    "count_solutions",
    "dfs_transcript",
    "format_board",
    "move_token",
    "parse_board",
    "solutions",
    "token_name",
    "unique_solution",
]
