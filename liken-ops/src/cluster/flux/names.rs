//! Flux's conventional names, which the deploy key, the engine and the
//! teardown all use: a module of their own below those three, so none of
//! them imports the feature's root (which imports them all).

/// The engine's namespace, by Flux's convention.
pub const FLUX_NAMESPACE: &str = "flux-system";
/// The deploy key Secret's name, by Flux's convention (the sync objects
/// name it).
pub const FLUX_SECRET: &str = "flux-system";
