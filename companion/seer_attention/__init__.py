"""SeerAttention (paper 01): a learned block-sparsity gate, self-distilled from a frozen model."""
