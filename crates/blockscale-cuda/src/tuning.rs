//! The kernels' tuning switches for measurements (`BLOCKSCALE_GEMM_*`, `BLOCKSCALE_GEMV_*`),
//! parsed one way: each caller reads its variable once and keeps the result.

/// An environment variable as a count, if set and a number.
pub(crate) fn env_usize(name: &str) -> Option<usize> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// A switch that is on unless the variable is set to `0`.
pub(crate) fn env_on(name: &str) -> bool {
    std::env::var(name).map_or(true, |v| v.trim() != "0")
}
