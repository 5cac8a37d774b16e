//! The rule that things fetched ahead ([`super::prefetch`],
//! [`super::heads_ahead`]) share: a change notice drops everything fetched
//! so far, and a fetch that was under way when a notice arrived is thrown
//! away when it lands. Directory attributes kept from replies
//! ([`super::dir_attrs`]) follow it too, a forget in place of the notice.

/// Counts the change notices a mount's fetches ahead have seen. A fetch
/// notes the generation when it starts and keeps what it got only if the
/// generation is still that one when it lands. It lives under the same
/// lock as what was fetched, so that a notice (which also drops what is
/// held) and a landing fetch are one before the other.
#[derive(Debug, Default)]
pub(super) struct ChangeGeneration(u64);

impl ChangeGeneration {
    /// A change notice arrived: fetches started before now are stale.
    pub(super) fn changed(&mut self) {
        self.0 += 1;
    }

    /// The generation a fetch starting now belongs to.
    pub(super) fn current(&self) -> u64 {
        self.0
    }

    /// Whether what a fetch started in generation `generation` got may
    /// still be kept: no notice arrived since.
    pub(super) fn still(&self, generation: u64) -> bool {
        self.0 == generation
    }
}

#[cfg(test)]
mod tests {
    use super::ChangeGeneration;

    #[test]
    fn a_fetch_is_kept_only_when_no_notice_arrived_since_it_started() {
        let mut g = ChangeGeneration::default();
        let before = g.current();
        assert!(g.still(before), "nothing changed yet");
        g.changed();
        assert!(!g.still(before), "a notice came after the fetch started");
        let after = g.current();
        assert!(g.still(after));
        g.changed();
        g.changed();
        assert!(!g.still(after) && !g.still(before));
    }
}
