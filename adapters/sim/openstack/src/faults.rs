//! Scripted faults: rules that replace or hold back the next answers of
//! chosen endpoints, in the order they were added.

use std::time::Duration;

use super::{Op, Service};

/// Which requests a fault rule applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    Any,
    /// Token requests.
    Keystone,
    /// Every Nova endpoint.
    Compute,
    /// Every Neutron endpoint.
    Network,
    /// One endpoint.
    Op(Op),
}

impl Target {
    fn matches(self, op: Op) -> bool {
        match self {
            Target::Any => true,
            Target::Keystone => op.service() == Service::Identity,
            Target::Compute => op.service() == Service::Compute,
            Target::Network => op.service() == Service::Network,
            Target::Op(target) => target == op,
        }
    }
}

/// What happens to a matching request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Answer this status (with the service's error body) without acting;
    /// 401 on a service call is a token refusal, 429 carries `Retry-After`.
    Status(u16),
    /// Wait this long, then handle the request normally.
    Delay(Duration),
    /// Handle the request (its effect happens), then hold the answer back
    /// this long: a client with a shorter timeout never learns the outcome.
    LoseAnswer(Duration),
    /// Answer this rate limit (413 or 429, without acting) asking the client
    /// to wait `retry_after` seconds: the `Retry-After` header and, on Nova,
    /// the `overLimit` fault's `retryAfter`, as Nova's `RateLimitFault`
    /// answers (nova/api/openstack/wsgi.py); Neutron's rate limits come from
    /// the proxy or middleware in front of it, with the same header.
    RateLimit { status: u16, retry_after: u32 },
    /// Answer with a `NeutronError` of this type (without acting), as
    /// Neutron answers quota and address exhaustion.
    Neutron { status: u16, kind: NeutronErrorKind },
}

impl Fault {
    /// Neutron's port or floating-IP quota: 409 `OverQuota`
    /// (neutron-lib `exceptions.OverQuota`).
    pub const OVER_QUOTA: Fault = Fault::Neutron { status: 409, kind: NeutronErrorKind::OverQuota };
    /// A full subnet: 409 `IpAddressGenerationFailure`.
    pub const NO_ADDRESSES: Fault = Fault::Neutron { status: 409, kind: NeutronErrorKind::IpAddressGenerationFailure };
    /// The policy forbids the call: 403 `PolicyNotAuthorized`.
    pub const POLICY: Fault = Fault::Neutron { status: 403, kind: NeutronErrorKind::PolicyNotAuthorized };
    /// No router from the port's subnet to the external network: 404
    /// `ExternalGatewayForFloatingIPNotFound`.
    pub const NO_EXTERNAL_GATEWAY: Fault =
        Fault::Neutron { status: 404, kind: NeutronErrorKind::ExternalGatewayForFloatingIPNotFound };
}

/// `NeutronError.type` values the simulator can answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NeutronErrorKind {
    OverQuota,
    IpAddressGenerationFailure,
    /// oslo.policy's refusal (neutron-lib `exceptions.PolicyNotAuthorized`, 403).
    PolicyNotAuthorized,
    /// A floating IP for a port whose subnet has no router to the external
    /// network (neutron/db/l3_db.py `_get_assoc_data` ->
    /// `l3_exc.ExternalGatewayForFloatingIPNotFound`, 404).
    ExternalGatewayForFloatingIPNotFound,
}

impl NeutronErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            NeutronErrorKind::OverQuota => "OverQuota",
            NeutronErrorKind::IpAddressGenerationFailure => "IpAddressGenerationFailure",
            NeutronErrorKind::PolicyNotAuthorized => "PolicyNotAuthorized",
            NeutronErrorKind::ExternalGatewayForFloatingIPNotFound => "ExternalGatewayForFloatingIPNotFound",
        }
    }

    /// Neutron's message for it (neutron-lib `exceptions`).
    pub fn message(self) -> &'static str {
        match self {
            NeutronErrorKind::OverQuota => "Quota exceeded for resources: ['port'].",
            NeutronErrorKind::IpAddressGenerationFailure => "No more IP addresses available on network.",
            NeutronErrorKind::PolicyNotAuthorized => "rule:create_port is disallowed by policy",
            NeutronErrorKind::ExternalGatewayForFloatingIPNotFound => {
                "External network external is not reachable from subnet of the port. Therefore, cannot associate \
                 the port with a Floating IP."
            }
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct FaultRules {
    rules: Vec<Rule>,
}

#[derive(Debug)]
struct Rule {
    target: Target,
    fault: Fault,
    remaining: u32,
}

impl FaultRules {
    pub(super) fn add(&mut self, target: Target, fault: Fault, times: u32) {
        if times > 0 {
            self.rules.push(Rule { target, fault, remaining: times });
        }
    }

    pub(super) fn clear(&mut self) {
        self.rules.clear();
    }

    /// The fault for this request, if a rule fires.
    pub(super) fn take(&mut self, op: Op) -> Option<Fault> {
        let rule = self.rules.iter_mut().find(|r| r.remaining > 0 && r.target.matches(op))?;
        if rule.remaining != u32::MAX {
            rule.remaining -= 1;
        }
        let fault = rule.fault;
        self.rules.retain(|r| r.remaining > 0);
        Some(fault)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_fire_in_order_and_run_out() {
        let mut rules = FaultRules::default();
        rules.add(Target::Op(Op::ServerCreate), Fault::Status(409), 1);
        rules.add(Target::Compute, Fault::Status(500), 2);
        assert_eq!(rules.take(Op::PortCreate), None);
        assert_eq!(rules.take(Op::ServerCreate), Some(Fault::Status(409)));
        assert_eq!(rules.take(Op::ServerCreate), Some(Fault::Status(500)));
        assert_eq!(rules.take(Op::ServerList), Some(Fault::Status(500)));
        assert_eq!(rules.take(Op::ServerList), None);
        rules.add(Target::Keystone, Fault::Status(503), u32::MAX);
        for _ in 0..3 {
            assert_eq!(rules.take(Op::Token), Some(Fault::Status(503)));
        }
    }
}
