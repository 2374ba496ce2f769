//! In-process stand-ins for the Kubernetes API and the cloud, with seeded
//! fault injection, for tests, the demo and the simulator.

pub mod cloud;
pub mod kube;
pub mod openstack;
pub mod serve;
pub mod simulate;

pub use kube::SimKube;
