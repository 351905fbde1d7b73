"""Paper 06: Sudoku by trial and error (Giannoulis, Pantis, Tzamos, NeurIPS 2025, arXiv 2509.22023)."""
