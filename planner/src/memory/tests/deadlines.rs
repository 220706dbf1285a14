//! Deadlines: `auto` and the lower bound stop when told, with their best so far, and a paced
//! deadline leaves room for the longest step.

use super::*;

#[test]
fn auto_under_a_deadline_returns_its_best_so_far() {
    let (p, _) = simgpu_model::Profile::load("p100").unwrap();
    let link = Link::from_profile(&p);
    let t = crate::generate::family("unet", 1, 8).unwrap().trace(&p);
    let budget = (t.peak() as f64 * 0.7) as u64;
    let full = run("auto", &t, budget, link).unwrap().1;
    let dtr = run("dtr", &t, budget, link).unwrap().1;
    // The recomputation selection's first run comes first: the questions it asks.
    let asked_first = std::cell::Cell::new(0usize);
    let a = Analysis::new(&t);
    crate::memory::capuchin::recompute_first(&t, &a, budget, link, &|| {
        asked_first.set(asked_first.get() + 1);
        true
    });
    for allowed in [0usize, 1, 3, 30, 100, 300, 1000, usize::MAX] {
        // A deadline that says stop after `allowed` questions, and counts those asked after.
        let asked = std::cell::Cell::new(0usize);
        let more = || {
            asked.set(asked.get() + 1);
            asked.get() <= allowed
        };
        let (plan, o) = run_until("auto", &t, budget, link, &more).unwrap();
        let again = simulate(&t, budget, link, &plan);
        assert_eq!((again.feasible, again.makespan), (o.feasible, o.makespan));
        // DTR's passive run comes next (asking once per step): given that long, never worse
        // than it.
        if allowed > asked_first.get() + t.steps.len() + 3 {
            assert!(
                time(&o) <= time(&dtr),
                "{allowed}: {} {}",
                time(&o),
                time(&dtr)
            );
        }
        if allowed == usize::MAX {
            assert_eq!(o.makespan, full.makespan);
        } else {
            // Once told to stop, every step asks once on its way out.
            let after = asked.get().saturating_sub(allowed);
            assert!(
                after <= 40,
                "{allowed}: asked {after} more times after the deadline"
            );
        }
    }
}

/// The lower bound asks the deadline as it goes (a 10,000-operation trace takes it a good part
/// of a second): told to stop, it gives nothing, having asked once more at most; given time,
/// exactly [`lower_bound`].
#[test]
fn the_bound_stops_at_a_deadline() {
    let (p, _) = simgpu_model::Profile::load("p100").unwrap();
    let link = Link::from_profile(&p);
    let t = crate::generate::family("unet", 1, 8).unwrap().trace(&p);
    let a = Analysis::new(&t);
    let budget = (t.peak() as f64 * 0.4) as u64;
    let full = bound::lower_bound_until(&t, &a, budget, link, &|| true).unwrap();
    assert_eq!(full, lower_bound(&t, budget, link));
    let asked = std::cell::Cell::new(0usize);
    let all = bound::lower_bound_until(&t, &a, budget, link, &|| {
        asked.set(asked.get() + 1);
        true
    });
    assert_eq!(all, Some(full));
    let total = asked.get();
    assert!(total > 10, "asked {total} times");
    for allowed in [0, 1, total / 2] {
        asked.set(0);
        let cut = bound::lower_bound_until(&t, &a, budget, link, &|| {
            asked.set(asked.get() + 1);
            asked.get() <= allowed
        });
        assert_eq!(cut, None, "{allowed}");
        assert_eq!(asked.get(), allowed + 1);
    }
}

/// A paced deadline stops while the longest step so far still fits before the end, not one step
/// past it; plain `now < end` would say yes at 8 s and run a 3 s step to 11.
#[test]
fn a_paced_deadline_leaves_room_for_the_longest_step_so_far() {
    let p = Pace::new(10.0);
    // Steps of 1 s, then one of 3 s: after it, 3 s must still fit.
    assert!(p.more(0.0));
    assert!(p.more(1.0));
    assert!(p.more(2.0));
    assert!(p.more(5.0)); // 5 + 3 < 10
    assert!(p.more(6.0)); // 6 + 3 < 10
    assert!(!p.more(7.0)); // 7 + 3 is the end: no room for another 3 s step
    // Never asked before: only the end counts, less the 1% kept back for returning.
    assert!(Pace::new(1.0).more(0.98));
    assert!(!Pace::new(1.0).more(0.995));
    assert!(!Pace::new(1.0).more(1.0));
}
