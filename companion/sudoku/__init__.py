"""Paper 06: Sudoku by trial and error.

Giannoulis, Pantis, Tzamos, *Teaching Transformers to Solve Combinatorial Problems through Efficient
Trial & Error*, NeurIPS 2025 (arXiv 2509.22023; official code gpt-reasoning/ReasoningCombinatorials).

Modules (the notebook is ``notebooks/06_sudoku_dfs.ipynb``, the GPU run ``benchmarks/sudoku_train_gpu.py``):

* :mod:`~companion.sudoku.board` - boards, the 1001-token action vocabulary, input checks;
* :mod:`~companion.sudoku.solver` - sequential rules (naked/hidden singles), the DFS transcript
  generator with multi-target labels, an exact solution counter;
* :mod:`~companion.sudoku.replay` - replaying transcripts, the DFS tree, the transcript verifier, the
  transcript grammar used for constrained decoding;
* :mod:`~companion.sudoku.rules` - the batched bitmask rule engine (numpy on the CPU, torch on the GPU);
* :mod:`~companion.sudoku.generator` - the paper's puzzle recipe, symmetries, puzzle files;
* :mod:`~companion.sudoku.backdoors` - backdoors and the two guessing oracles;
* :mod:`~companion.sudoku.mssc` - contextual Min-Sum Set Cover (App. E: Example E.1, Theorem E.2);
* :mod:`~companion.sudoku.policy` - the one-level guess policy trained with L1 or L2;
* :mod:`~companion.sudoku.model` - the GPT-2, the multi-target losses, training, decoding, checkpoints;
* :mod:`~companion.sudoku.scale` - the one-GPU run (no plotly);
* :mod:`~companion.sudoku.explorer` - the DFS-trace explorer (plotly, ipywidgets; notebook only).
"""

from companion.sudoku.board import (
    DEAD_END,
    GUESS,
    PAD,
    SOLVED,
    START,
    THINK,
    VOCAB_SIZE,
    StepLimitExceeded,
    SudokuError,
    format_board,
    move_token,
    parse_board,
    token_name,
)
from companion.sudoku.solver import Transcript, count_solutions, dfs_transcript, solutions, unique_solution

__all__ = [
    "DEAD_END",
    "GUESS",
    "PAD",
    "SOLVED",
    "START",
    "THINK",
    "VOCAB_SIZE",
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
