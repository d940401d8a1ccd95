//! The journalled apply: instances, gres.conf, re-registration, the wait for Slurm, the
//! published layout; and keeping the slurmd the agent started alive.

use super::*;

impl Agent {
    /// [`Agent::apply_timed`], the outcome as a [`Step`].
    pub(super) fn run_apply(&mut self, target: &NodeLayout, drained: bool, idle_wait: Option<Duration>) -> Step {
        match self.apply_timed(target, drained, idle_wait) {
            Ok(()) => Step::Applied(target.clone()),
            Err(e) => self.fail(format!("{e:#}")),
        }
    }

    /// Leaves the node drained with the reason and clears the journal, so that the agent does
    /// not retry in a loop: an administrator decides (`scontrol update state=resume`).
    pub(super) fn fail(&mut self, why: String) -> Step {
        self.metrics.apply_failed();
        let _ = self.slurm.drain(&self.settings.node, &NodeIntent::Failed(why.clone()));
        let _ = remove_if_present(&self.settings.paths.journal());
        self.events
            .append(&self.event(EventKind::RepartitionFailed).detail(&why).encode());
        Step::Failed(why)
    }

    /// Writes the applied layout into the node's `Extra` when it is missing or stale (after
    /// a restart of the agent, or a node registered by `dynmig init-node`).
    pub(super) fn publish_if_stale(&self, n: &NodeInfo) {
        let Ok(gpus) = self.backend.gpus() else { return };
        let layout = NodeLayout {
            gpus: gpus.iter().map(|g| g.layout()).collect(),
        };
        if !shows_totals(&n.gres, &layout.totals()) {
            return; // Slurm has not caught up with the GPUs: not ours to claim yet.
        }
        let text = PublishedLayout(layout).encode();
        if n.extra != text {
            if let Err(e) = self.slurm.set_node_extra(&self.settings.node, &text) {
                log::warn!("{}: publishing the layout: {e}", self.settings.node);
            }
        }
    }

    /// Writes gres.conf for what the GPUs hold, trying [`GRES_CONF_TRIES`] times: the GPUs
    /// already hold `target` here, so a transient read error (an NVML timeout) must not leave
    /// them with a gres.conf and a Slurm registration of the old layout. Found by
    /// tests/cluster/faults.rs (one failed read of the GPUs there).
    ///
    /// # Errors
    /// Every try failed; the text says that the GPUs hold `target` and gres.conf does not.
    fn write_gres_conf(&self, target: &NodeLayout) -> Result<String> {
        let path = &self.settings.paths.gres_conf;
        let mut tries = 0;
        loop {
            tries += 1;
            match dynmig_gpu::gres_conf::write_for(self.backend.as_ref(), path) {
                Ok(gres) => return Ok(gres),
                Err(e) if tries < GRES_CONF_TRIES => {
                    log::warn!("{}: writing {} (try {tries}): {e:#}", self.settings.node, path.display());
                    std::thread::sleep(Duration::from_millis(300));
                }
                Err(e) => {
                    return Err(anyhow!(
                        "the GPUs hold {target} but {} could not be rewritten ({tries} tries; it still describes the old layout): {e:#}",
                        path.display()
                    ))
                }
            }
        }
    }

    /// Applies `target`, every step idempotent and journalled.
    ///
    /// # Errors
    /// A backend refusal or a busy instance in the way, gres.conf not written, re-registration
    /// failed, or Slurm not taking the node back in time.
    pub fn apply(&mut self, target: &NodeLayout) -> Result<()> {
        self.apply_timed(target, false, None)
    }

    /// [`Agent::apply`], timing each step ([`StepTimes`]). `drained`: the caller has just
    /// seen the node drained for `target` (so it cannot already be back with it: the Register
    /// step need not ask Slurm again); `idle_wait`: how long the node was seen drained with
    /// jobs before.
    fn apply_timed(&mut self, target: &NodeLayout, drained: bool, idle_wait: Option<Duration>) -> Result<()> {
        let s = self.settings.clone();
        let started = Instant::now();
        let mut times = StepTimes::default();
        if let Some(w) = idle_wait {
            times.add("idle_wait", w);
        }
        let mut journal = Journal {
            target: target.clone(),
            step: JournalStep::Instances,
            started: dynmig_host::clock::now_secs().max(0) as u64,
        };
        self.save_journal(&journal)?;
        self.events
            .append(&self.event(EventKind::ApplyStart).layout(target).encode());
        self.metrics.apply_started();
        log::info!("{}: applying {target}", s.node);

        let t = Instant::now();
        let mut owned = Ownership::load(&s.paths.owned_instances())?;
        let ops = apply_transition(self.backend.as_mut(), s.model, target, &mut owned)?;
        times.add("instances", t.elapsed());

        journal.step = JournalStep::GresConf;
        self.save_journal(&journal)?;
        let t = Instant::now();
        let gres = self.write_gres_conf(target)?;
        times.add("gres_conf", t.elapsed());

        journal.step = JournalStep::Register;
        self.save_journal(&journal)?;
        let already = !drained
            && self
                .slurm
                .node(&s.node)?
                .is_some_and(|n| !n.is_drain() && shows_totals(&n.gres, &target.totals()));
        if !already {
            self.reregister_timed(&s.node, &gres, &mut times)?;
        }

        journal.step = JournalStep::Wait;
        self.save_journal(&journal)?;
        let t = Instant::now();
        let until = t + s.register_timeout;
        // When the node's daemon was seen gone (killed during its registration).
        let mut gone_since: Option<Instant> = None;
        let mut again = 0;
        // Time spent registering again within the wait (counted in its own steps).
        let mut inside = Duration::ZERO;
        let back_at = loop {
            let running = self.reregister.daemon_running();
            if let Some(n) = self.slurm.node(&s.node)? {
                let back = !n.is_drain() && !n.is_down() && shows_totals(&n.gres, &target.totals());
                // Running before the read and still after it: a daemon killed while Slurm
                // answered is not taken for the one that registered.
                if back && running != Some(false) && self.reregister.daemon_running() != Some(false) {
                    break dynmig_host::clock::now_secs_f64();
                }
            }
            // Gone for a while (its pid file may name the old daemon for a moment after a
            // start): start it again, as the Register step does. Found by
            // tests/cluster/faults.rs: a slurmd killed before it registered left the node
            // deleted from Slurm, and the apply failed after register_timeout with no node
            // to drain.
            if running == Some(false) {
                let since = *gone_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= DAEMON_GONE_GRACE && again < REREGISTER_AGAIN {
                    again += 1;
                    gone_since = None;
                    log::warn!(
                        "{}: slurmd is gone before the node came back; registering again ({again})",
                        s.node
                    );
                    let r = Instant::now();
                    self.reregister_timed(&s.node, &gres, &mut times)?;
                    inside += r.elapsed();
                }
            } else {
                gone_since = None;
            }
            if Instant::now() > until {
                bail!(
                    "node {} did not come back with GRES {gres} within {:?}",
                    s.node,
                    s.register_timeout
                );
            }
            std::thread::sleep(REGISTER_POLL);
        };
        times.add("registration", t.elapsed().saturating_sub(inside));
        let in_service = started.elapsed();
        let t = Instant::now();
        self.slurm
            .set_node_extra(&s.node, &PublishedLayout(target.clone()).encode())
            .map_err(|e| anyhow!("publishing the layout: {e}"))?;
        self.points.reach("published");
        remove_if_present(&s.paths.journal())?;
        times.add("publish", t.elapsed());
        self.metrics.apply_finished(in_service);
        self.metrics.steps(&times);
        log::info!(
            "{}: {target} in service after {:.3} s; {}",
            s.node,
            in_service.as_secs_f64(),
            times.encode()
        );
        // Stamped when Slurm showed the node back: that is when it serves again (publishing
        // the layout for the controller comes after, its time is the `publish` step).
        let mut ev = self.event(EventKind::Applied).layout(target).detail(&format!(
            "{ops} instance operations, {:.2} s; {}",
            in_service.as_secs_f64(),
            times.encode()
        ));
        ev.time = back_at;
        self.events.append(&ev.encode());
        self.last_steps = Some(times);
        self.serving_gres = Some(gres);
        self.slurmd_dead_since = None;
        Ok(())
    }

    /// Starts the node's slurmd again when the one this agent started (by an apply) died
    /// without being stopped: its pid file still names it, but no live slurmd holds that pid
    /// (SIGKILL, a crash) for [`DAEMON_GONE_GRACE`]. A slurmd stopped on purpose (SIGTERM:
    /// `systemctl stop`, `scontrol shutdown`) removes its pid file and is left stopped. The
    /// agent started that slurmd itself (`slurmd -Z`, outside any systemd unit), so nothing
    /// else would: Slurm would mark the node not responding and requeue what it sent there.
    /// Found by tests/cluster/faults.rs on 26.05 (CI, 2026-11-29): a slurmd killed right
    /// after it registered left the node down.
    ///
    /// Reads no Slurm while the daemon lives (a look at `/proc`); `None` when there was
    /// nothing to do, else whether starting it again worked. Never during an apply (the
    /// journal's Wait step has its own check).
    pub fn keep_slurmd(&mut self) -> Option<Result<()>> {
        self.serving_gres.as_ref()?;
        if self.reregister.daemon_running() != Some(false) || self.settings.paths.journal().exists() {
            self.slurmd_dead_since = None;
            return None;
        }
        let since = *self.slurmd_dead_since.get_or_insert_with(Instant::now);
        if since.elapsed() < DAEMON_GONE_GRACE {
            return None;
        }
        self.slurmd_dead_since = None;
        let gres = self.serving_gres.clone()?;
        let node = self.settings.node.clone();
        log::warn!("{node}: the slurmd this agent started died (its pid file names no live slurmd); starting it again with {gres}");
        let r = self
            .reregister
            .reregister(self.slurm.as_ref(), &node, &gres, &mut |_| {});
        let detail = match &r {
            Ok(()) => format!("slurmd died; started again with {gres}"),
            Err(e) => format!("slurmd died; starting it again failed: {e:#}"),
        };
        self.events
            .append(&self.event(EventKind::SlurmdRestarted).detail(&detail).encode());
        Some(r)
    }

    /// Re-registers the node ([`Reregister`]), adding the time up to each `register:*` point to
    /// its step in `times`.
    fn reregister_timed(&mut self, node: &str, gres: &str, times: &mut StepTimes) -> Result<()> {
        let points = &mut self.points;
        let mut last = Instant::now();
        let mut marks: Vec<(&'static str, Duration)> = Vec::new();
        let r = self.reregister.reregister(self.slurm.as_ref(), node, gres, &mut |p| {
            let step = match p {
                "register:stopped" => Some("slurmd_stop"),
                "register:deleted" => Some("delete"),
                "register:started" => Some("slurmd_start"),
                _ => None,
            };
            if let Some(step) = step {
                marks.push((step, last.elapsed()));
                last = Instant::now();
            }
            points.reach(p);
        });
        for (step, d) in marks {
            times.add(step, d);
        }
        r
    }
}
