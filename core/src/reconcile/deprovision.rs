//! Deletion: the provider server goes first; references are released only
//! once the provider confirms it absent, then the Server's finalizer goes.

use super::decision::{Action, Decision, Outcome};
use super::facts::{Facts, ProviderView};
use super::plan::Plan;
use super::provision::server_ref;
use super::references;
use crate::model::{SERVER_FINALIZER, Server};

pub(crate) fn deprovision(server: &Server, facts: &Facts, mut plan: Plan) -> Decision {
    match &facts.provider {
        ProviderView::Unknown(reason) => {
            plan.finish(Outcome::Yield(format!("Waiting for the provider to answer before deleting: {reason}")))
        }
        ProviderView::Present(_) => {
            plan.provider(Action::DeleteProviderServer(server_ref(server)));
            plan.finish(Outcome::Yield("Deleting provider server".into()))
        }
        ProviderView::Absent => {
            for action in references::to_release(server, facts) {
                plan.trail(action);
            }
            if server.meta.has_finalizer(SERVER_FINALIZER) {
                plan.trail(Action::RemoveFinalizer);
            }
            plan.finish(Outcome::Done)
        }
    }
}
