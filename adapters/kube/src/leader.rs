//! Leader election on a `coordination.k8s.io/v1` Lease, with client-go's
//! algorithm (`tools/leaderelection`): every retry period a candidate reads
//! the Lease and takes it when it is free or its record has not changed for
//! a whole lease duration *as observed on the candidate's own monotonic
//! clock* (never by comparing the holder's `renewTime` with the local wall
//! clock, so clock skew between nodes cannot make two leaders). Every write
//! is a PUT carrying the resourceVersion just read: of two candidates racing
//! for a free Lease, one gets 409 Conflict.
//!
//! The leader renews every retry period. Each successful renewal opens the
//! [`Fence`] until the moment that renewal was *sent* plus the renew
//! deadline; the others can take over only a full lease duration after they
//! observe that write, which is later still. When renewals keep failing the
//! fence closes at the renew deadline and the replica stops acting at once,
//! lease duration − renew deadline before anyone else may start.
//!
//! On shutdown the leader closes its fence first, then releases the Lease
//! (holder cleared, guarded by the resourceVersion), so a follower takes
//! over at its next retry instead of waiting for expiry.
//!
//! Why not a crate: kube-lease-manager 0.13 (the only one for kube 5) keeps
//! reporting leadership while its renewals fail (a partitioned leader acts
//! on), judges expiry by the holder's `renewTime` against the local wall
//! clock, and takes leases with server-side apply or forced patches without
//! a resourceVersion precondition.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::error::{api_code, short_message};
use crate::fence::Fence;
use crate::shutdown::Shutdown;

/// Where and how to hold the leader Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseConfig {
    /// Namespace of the Lease (the operator's own).
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This replica's identity (the pod name): the Lease's holder while it leads.
    pub identity: String,
    /// How long others wait, after they last saw the Lease change, before taking it.
    pub lease_duration: Duration,
    /// How long the leader may go without a successful renewal before it stops acting.
    pub renew_deadline: Duration,
    /// Interval between attempts to acquire or renew.
    pub retry_period: Duration,
}

impl LeaseConfig {
    /// client-go's and controller-runtime's defaults.
    pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
    pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
    pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);
    pub const DEFAULT_NAME: &'static str = "server-controller-leader";

    /// A configuration with the default timings.
    pub fn new(namespace: impl Into<String>, identity: impl Into<String>) -> Self {
        LeaseConfig {
            namespace: namespace.into(),
            name: Self::DEFAULT_NAME.into(),
            identity: identity.into(),
            lease_duration: Self::DEFAULT_LEASE_DURATION,
            renew_deadline: Self::DEFAULT_RENEW_DEADLINE,
            retry_period: Self::DEFAULT_RETRY_PERIOD,
        }
    }

    /// Refuses timings under which two replicas could act at once, or a
    /// leader could not renew in time (client-go refuses the same).
    pub fn validate(&self) -> Result<(), String> {
        if self.namespace.is_empty() || self.name.is_empty() || self.identity.is_empty() {
            return Err("the leader Lease needs a namespace, a name and an identity".into());
        }
        if self.renew_deadline >= self.lease_duration {
            return Err(format!(
                "the renew deadline ({:?}) must be shorter than the lease duration ({:?}), or a leader that cannot renew would act after others may take over",
                self.renew_deadline, self.lease_duration
            ));
        }
        if self.retry_period.is_zero() || self.retry_period >= self.renew_deadline {
            return Err(format!(
                "the retry period ({:?}) must be positive and shorter than the renew deadline ({:?})",
                self.retry_period, self.renew_deadline
            ));
        }
        if self.lease_duration.subsec_nanos() != 0
            || self.lease_duration.as_secs() < 1
            || i32::try_from(self.lease_duration.as_secs()).is_err()
        {
            return Err(format!("the lease duration ({:?}) must be whole seconds (1 or more)", self.lease_duration));
        }
        Ok(())
    }

    fn duration_seconds(&self) -> i32 {
        i32::try_from(self.lease_duration.as_secs()).unwrap_or(i32::MAX)
    }
}

/// The Lease as last observed, and when this replica first saw it so.
#[derive(Debug)]
struct Observed {
    resource_version: String,
    holder: Option<String>,
    duration: Duration,
    at: Instant,
}

/// What one attempt found.
#[derive(Debug, PartialEq, Eq)]
enum Attempt {
    /// This replica holds the Lease; the renewal was sent at this instant.
    Leading { sent: Instant },
    /// Another replica holds it (or won the race).
    Following,
}

struct Elector {
    api: Api<Lease>,
    config: LeaseConfig,
    fence: Fence,
    observed: Option<Observed>,
}

/// Runs the election until `stop` resolves, then releases the Lease if held.
pub(crate) async fn run(client: Client, config: LeaseConfig, fence: Fence, stop: Shutdown) {
    let api = Api::namespaced(client, &config.namespace);
    let mut elector = Elector { api, config, fence, observed: None };
    info!(lease = %elector.config.name, namespace = %elector.config.namespace, identity = %elector.config.identity, "leader election started");
    let mut stop = std::pin::pin!(stop);
    loop {
        let pause = tokio::select! {
            () = &mut stop => break,
            pause = elector.step() => pause,
        };
        tokio::select! {
            () = &mut stop => break,
            () = tokio::time::sleep(pause) => {}
        }
    }
    elector.release().await;
}

impl Elector {
    /// One acquire-or-renew attempt and its effect on the fence; returns how
    /// long to wait before the next.
    async fn step(&mut self) -> Duration {
        let was_leading = self.fence.holds();
        // A renewal that cannot finish before the fence closes is useless.
        let budget = self.fence.deadline().map_or(self.config.renew_deadline, |d| d - Instant::now());
        let outcome = tokio::time::timeout(budget, self.try_acquire_or_renew()).await;
        match outcome {
            Ok(Ok(Attempt::Leading { sent })) => {
                self.fence.extend(sent + self.config.renew_deadline);
                if !was_leading {
                    info!(identity = %self.config.identity, lease = %self.config.name, "became the leader");
                }
            }
            Ok(Ok(Attempt::Following)) => {
                if was_leading {
                    warn!(identity = %self.config.identity, "lost the leader lease to another replica; stopping work");
                }
                self.fence.revoke();
            }
            Ok(Err(error)) => {
                warn!(identity = %self.config.identity, error = %short_message(&error), "acquiring or renewing the leader lease failed");
            }
            Err(_) => warn!(identity = %self.config.identity, ?budget, "renewing the leader lease timed out"),
        }
        if was_leading && !self.fence.holds() {
            warn!(identity = %self.config.identity, renew_deadline = ?self.config.renew_deadline, "no renewal within the renew deadline: stopped acting");
            self.fence.revoke();
        }
        self.config.retry_period
    }

    async fn try_acquire_or_renew(&mut self) -> Result<Attempt, kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.config.name).await? else {
            return self.create().await;
        };
        let now = Instant::now();
        let spec = lease.spec.clone().unwrap_or_default();
        let resource_version = lease.metadata.resource_version.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        if self.observed.as_ref().is_none_or(|o| o.resource_version != resource_version) {
            // A follower says who leads whenever it sees the holder change.
            let before = self.observed.as_ref().and_then(|o| o.holder.as_deref());
            if let Some(leader) = holder.as_deref()
                && before != Some(leader)
                && leader != self.config.identity
            {
                info!(holder = %leader, lease = %self.config.name, identity = %self.config.identity, "another replica leads; following");
            }
            let seconds = spec.lease_duration_seconds.and_then(|s| u64::try_from(s).ok());
            let duration = seconds.map_or(self.config.lease_duration, Duration::from_secs);
            self.observed = Some(Observed { resource_version, holder: holder.clone(), duration, at: now });
        }
        let mine = holder.as_deref() == Some(self.config.identity.as_str());
        if let Some(observed) = &self.observed
            && observed.holder.is_some()
            && !mine
            && now < observed.at + observed.duration
        {
            debug!(holder = ?observed.holder, "the leader lease is held by another replica");
            return Ok(Attempt::Following);
        }
        let sent = Instant::now();
        let wall = MicroTime(crate::kube_api::precise_now());
        let transitions = spec.lease_transitions.unwrap_or(0);
        lease.spec = Some(LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(self.config.duration_seconds()),
            acquire_time: if mine { spec.acquire_time.clone() } else { Some(wall.clone()) },
            renew_time: Some(wall),
            lease_transitions: Some(if mine { transitions } else { transitions.saturating_add(1) }),
            ..spec
        });
        // The PUT carries the resourceVersion read above: a concurrent
        // writer makes it a 409, never a silent overwrite.
        match self.api.replace(&self.config.name, &PostParams::default(), &lease).await {
            Ok(written) => {
                self.observe_own(&written, sent);
                Ok(Attempt::Leading { sent })
            }
            Err(error) if api_code(&error) == Some(409) => Ok(Attempt::Following),
            Err(error) => Err(error),
        }
    }

    async fn create(&mut self) -> Result<Attempt, kube::Error> {
        let sent = Instant::now();
        let wall = MicroTime(crate::kube_api::precise_now());
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.config.name.clone()),
                namespace: Some(self.config.namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.config.identity.clone()),
                lease_duration_seconds: Some(self.config.duration_seconds()),
                acquire_time: Some(wall.clone()),
                renew_time: Some(wall),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        };
        match self.api.create(&PostParams::default(), &lease).await {
            Ok(written) => {
                self.observe_own(&written, sent);
                Ok(Attempt::Leading { sent })
            }
            // Another replica created it first.
            Err(error) if api_code(&error) == Some(409) => Ok(Attempt::Following),
            Err(error) => Err(error),
        }
    }

    fn observe_own(&mut self, written: &Lease, sent: Instant) {
        self.observed = Some(Observed {
            resource_version: written.metadata.resource_version.clone().unwrap_or_default(),
            holder: Some(self.config.identity.clone()),
            duration: self.config.lease_duration,
            at: sent,
        });
    }

    /// Stops acting, then hands the Lease back if this replica holds it.
    async fn release(&mut self) {
        let held = self.fence.holds();
        self.fence.revoke();
        if !held {
            return;
        }
        match tokio::time::timeout(self.config.retry_period, self.clear_holder()).await {
            Ok(Ok(true)) => info!(identity = %self.config.identity, "released the leader lease"),
            Ok(Ok(false)) => {}
            Ok(Err(error)) => {
                warn!(identity = %self.config.identity, error = %short_message(&error), "releasing the leader lease failed; it expires on its own")
            }
            Err(_) => {
                warn!(identity = %self.config.identity, "releasing the leader lease timed out; it expires on its own")
            }
        }
    }

    async fn clear_holder(&self) -> Result<bool, kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.config.name).await? else {
            return Ok(false);
        };
        let mut spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return Ok(false);
        }
        // As client-go releases: no holder, a one-second duration.
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(crate::kube_api::precise_now()));
        lease.spec = Some(spec);
        match self.api.replace(&self.config.name, &PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(error) if api_code(&error) == Some(409) => Ok(false),
            Err(error) => Err(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timings_that_would_allow_two_leaders_are_refused() {
        let good = LeaseConfig::new("ns", "pod-a");
        assert_eq!(good.validate(), Ok(()));
        let deadline_too_long = LeaseConfig { renew_deadline: Duration::from_secs(15), ..good.clone() };
        assert!(deadline_too_long.validate().is_err_and(|e| e.contains("renew deadline")));
        let retry_too_long = LeaseConfig { retry_period: Duration::from_secs(10), ..good.clone() };
        assert!(retry_too_long.validate().is_err_and(|e| e.contains("retry period")));
        let no_identity = LeaseConfig { identity: String::new(), ..good.clone() };
        assert!(no_identity.validate().is_err());
        let sub_second = LeaseConfig {
            lease_duration: Duration::from_millis(900),
            renew_deadline: Duration::from_millis(600),
            retry_period: Duration::from_millis(200),
            ..good
        };
        assert!(sub_second.validate().is_err_and(|e| e.contains("whole seconds")));
    }
}
