"""The coordinator: a read-only causal LM's hidden state, a linear routing head, optional SVF."""
