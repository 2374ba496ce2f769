//! SimKube driven by kube-rs itself: `Client`, `Api`, `watcher`, `Controller`.

mod common;
mod controller;
mod crud;
mod kubectl_surface;
mod watch;
