"""env: the environment the engine needs on the box: soname links, CUDA paths, the activation snippet."""
