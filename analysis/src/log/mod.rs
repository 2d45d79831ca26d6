//! XLA/JAX/TSL log analysis (`memwatch log`). Placeholder module list filled below.
