"""Evolution: sep-CMA-ES generations, fitness shaping, checkpoints and Polars tables."""
