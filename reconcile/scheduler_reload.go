package reconcile

import (
	"maps"
	"reflect"
	"slices"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-exporter/outbox_exporter/internal/config"
)

// jobDeps is what job name reads from the config: its own section, the
// outbox it names and the databases of its authority and target. A
// reload keeps a job whose deps compare equal (and whose pools are the
// same), so a change elsewhere in the config leaves it alone.
func jobDeps(cfg *config.Config, name string) []any {
	j := cfg.Reconcile[name]
	if j == nil {
		return nil
	}
	out := []any{j, cfg.Databases[j.Authority.Database]}
	if j.Target != nil {
		out = append(out, cfg.Databases[j.Target.Database])
	}
	if j.Outbox != nil {
		out = append(out, cfg.Outboxes[j.Outbox.Name])
	}
	return out
}

// Reload is a change of a Scheduler's jobs to those of a new config,
// prepared by Prepare and made by Apply.
type Reload struct {
	s *Scheduler
	// Kept, Fresh and Removed name the jobs the reload keeps with their
	// state, starts afresh (added or changed) and drops, sorted.
	Kept, Fresh, Removed []string
	fresh                map[string]*jobState
	names                []string
}

// Prepare compares cfg's reconcile jobs with s's and builds the plans of
// the added and changed ones, without changing s: on error s runs on as
// it was. pools are the pools of the new config; a job keeps its state
// only when what it reads is unchanged and its pools are the same ones.
func (s *Scheduler) Prepare(cfg *config.Config, pools map[string]*pgxpool.Pool) (*Reload, error) {
	r := &Reload{s: s, fresh: map[string]*jobState{}}
	s.jobsMu.RLock()
	old := maps.Clone(s.jobs)
	s.jobsMu.RUnlock()
	for _, name := range slices.Sorted(maps.Keys(cfg.Reconcile)) {
		r.names = append(r.names, name)
		if js := old[name]; js != nil && js.unchanged(cfg, name, pools) {
			r.Kept = append(r.Kept, name)
			continue
		}
		js, err := s.newJob(name, cfg, pools)
		if err != nil {
			return nil, err
		}
		r.fresh[name] = js
		r.Fresh = append(r.Fresh, name)
	}
	for _, name := range slices.Sorted(maps.Keys(old)) {
		if cfg.Reconcile[name] == nil {
			r.Removed = append(r.Removed, name)
		}
	}
	// The options the Scheduler was built with apply to the new jobs too.
	tmp := &Scheduler{jobs: r.fresh}
	for _, o := range s.opts {
		o(tmp)
	}
	return r, nil
}

// unchanged reports whether the job reads the same from cfg and pools as
// it did.
func (js *jobState) unchanged(cfg *config.Config, name string, pools map[string]*pgxpool.Pool) bool {
	if !reflect.DeepEqual(js.deps, jobDeps(cfg, name)) {
		return false
	}
	j := cfg.Reconcile[name]
	if pools[j.Authority.Database] != js.plan.authority {
		return false
	}
	return j.Target == nil || pools[j.Target.Database] == js.plan.target
}

// Apply makes the reload: the kept jobs go on untouched (their last
// results, last success, a run in progress and their places in the
// schedule); a removed or changed job's schedule is taken out of the
// cron, its run in progress is cancelled and waited for, and its state
// and series are dropped; the fresh jobs are scheduled from now. Call it
// once, when nothing else of the reload can fail.
func (r *Reload) Apply() {
	s := r.s
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	s.jobsMu.Lock()
	var gone []*jobState
	for name, js := range s.jobs {
		if _, fresh := r.fresh[name]; fresh || !slices.Contains(r.names, name) {
			gone = append(gone, js)
			delete(s.jobs, name)
		}
	}
	for name, js := range r.fresh {
		s.jobs[name] = js
	}
	s.names = slices.Clone(r.names)
	s.jobsMu.Unlock()
	for _, js := range gone {
		for _, id := range js.entries {
			s.cron.Remove(id)
		}
		if js.running.Load() {
			how := "removed"
			if _, fresh := r.fresh[js.plan.name]; fresh {
				how = "changed"
			}
			s.logger.Warn("reconcile run cancelled: a config reload "+how+" its job", "reconcile", js.plan.name)
		}
		js.mu.Lock()
		js.removed = true
		js.mu.Unlock()
		js.cancel()
	}
	for _, js := range gone {
		js.runs.Wait()
	}
	for _, name := range r.Fresh {
		s.schedule(name, r.fresh[name])
	}
}
