package leader

import (
	"context"
	"fmt"
	"slices"
)

// What a reload changes in a running Elector: the tasks it stands for and
// the work each runs. An Elector kept across a reload keeps its session
// and the locks it holds, so the tasks that stay are not handed over: no
// gap in their work, no takeover wait, no churn of leases.

// SetTasks makes the Elector stand for tasks from now on. A task dropped
// ends its term here (its work stopped and returned before SetTasks
// returns), and its lock is freed at the next round, for a replica that
// still has it to take; a task added is tried at the next round like any
// task not led. The tasks that stay keep their terms.
func (e *Elector) SetTasks(tasks []string) {
	tasks = slices.Sorted(slices.Values(tasks))
	e.mu.Lock()
	var stopped []*running
	for _, task := range e.tasks {
		if slices.Contains(tasks, task) {
			continue
		}
		if t := e.terms[task]; t != nil {
			t.cancel()
			stopped = append(stopped, t.work...)
			e.logger.Info("leader election: no longer leading", "task", task, "why", "the task is no longer configured")
		}
		if _, ok := e.acquired[task]; ok {
			e.release = append(e.release, Key(task))
		}
		delete(e.terms, task)
		delete(e.acquired, task)
		delete(e.holders, task)
		delete(e.onLead, task)
	}
	e.tasks = tasks
	e.mu.Unlock()
	for _, r := range stopped {
		<-r.done
	}
}

// SetWork replaces the work of task with f: while a term of task runs,
// the work started in it stops (its context ends, it returns) and f
// starts in the same term, which goes on; later terms start f alone.
func (e *Elector) SetWork(task string, f func(ctx context.Context)) {
	e.mu.Lock()
	e.onLead[task] = nil
	t := e.terms[task]
	var old []*running
	if t != nil {
		old, t.work = t.work, nil
	}
	e.mu.Unlock()
	for _, r := range old {
		r.cancel()
		<-r.done
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.onLead[task] = []func(context.Context){f}
	if cur := e.terms[task]; cur != nil && cur == t {
		e.startLocked(cur, f)
	}
}

// freeDropped frees the locks of the tasks SetTasks dropped while this
// session held them; an error is a session lost.
func (e *Elector) freeDropped(ctx context.Context) error {
	e.mu.Lock()
	keys := e.release
	e.release = nil
	e.mu.Unlock()
	if len(keys) == 0 {
		return nil
	}
	qctx, cancel := context.WithTimeout(ctx, e.timing.Check)
	defer cancel()
	if err := e.sess.Unlock(qctx, keys); err != nil {
		return fmt.Errorf("free %d lease(s) of dropped tasks: %w", len(keys), err)
	}
	return nil
}
