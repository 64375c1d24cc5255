//! Stable assignment of files to tasks. A task keeps its unfinished files when new ones
//! arrive; each new file goes to the task with the fewest unfinished files, and a new
//! task is opened (up to `tasks.max`) only when every task already has work, so there are
//! never more tasks than files that need them. Each task holds at most `window`
//! unfinished files; the rest wait, so a directory of 100,000 files never becomes one
//! huge task config. Only tasks whose list changes get a new config (and are restarted
//! by the host), and a task the connector holds back (one reading a file that is no
//! longer at its listed path, which a restart would lose) gets no new file.

use std::collections::{BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};

/// One file in a task's config: which file (identity and where it was listed), and
/// which version and attempt of it to read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assigned {
    pub id: String,
    pub path: String,
    pub version: u32,
    pub attempt: u32,
}

/// `tasks[i]` = files of task `i`, in assignment order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Assignment {
    pub tasks: Vec<Vec<Assigned>>,
}

impl Assignment {
    /// Moves files from `pending` onto tasks while there is room. `open(entry)` says
    /// whether an entry of a task's list still needs its task (not finished, and not an
    /// earlier version or attempt of a file since handed to another task); `held(task)` whether a task must not be
    /// restarted now, so gets nothing. A task that receives files drops its finished ones
    /// (its config changes anyway); other tasks are left exactly as they were. Returns the
    /// tasks whose file list changed.
    pub fn add(
        &mut self,
        pending: &mut VecDeque<Assigned>,
        open: impl Fn(&Assigned) -> bool,
        held: impl Fn(usize) -> bool,
        max_tasks: usize,
        window: usize,
    ) -> BTreeSet<usize> {
        let mut changed = BTreeSet::new();
        let mut load: Vec<usize> = self.tasks.iter().map(|files| files.iter().filter(|f| open(f)).count()).collect();
        while let Some(file) = pending.front() {
            if self.tasks.iter().flatten().any(|f| f.id == file.id && open(f)) {
                pending.pop_front();
                continue;
            }
            if self.tasks.len() < max_tasks.max(1) && load.iter().all(|&n| n > 0) {
                self.tasks.push(Vec::new());
                load.push(0);
            }
            let Some((task, _)) =
                load.iter().enumerate().filter(|(i, n)| **n < window && !held(*i)).min_by_key(|(i, n)| (**n, *i))
            else {
                break; // every task is full or held: the rest waits for room
            };
            let file = pending.pop_front().expect("front exists");
            if !changed.contains(&task) {
                self.tasks[task].retain(|f| open(f));
            }
            // An earlier attempt of the same file in this list would be read again too.
            self.tasks[task].retain(|f| f.id != file.id);
            self.tasks[task].push(file);
            load[task] += 1;
            changed.insert(task);
        }
        changed
    }

    /// Drops trailing tasks that have nothing left to read (the host stops them). Returns
    /// whether the task count changed.
    pub fn drop_idle_tail(&mut self, open: impl Fn(&Assigned) -> bool) -> bool {
        let before = self.tasks.len();
        while self.tasks.last().is_some_and(|files| !files.iter().any(&open)) {
            self.tasks.pop();
        }
        self.tasks.len() != before
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(id: &str) -> Assigned {
        Assigned { id: id.into(), path: format!("{id}.log"), version: 0, attempt: 0 }
    }

    fn ids(files: &[Assigned]) -> Vec<&str> {
        files.iter().map(|f| f.id.as_str()).collect()
    }

    #[test]
    fn tasks_follow_the_work_up_to_tasks_max() {
        let mut a = Assignment::default();
        let mut pending: VecDeque<Assigned> = [file("1")].into();
        // One file, tasks.max 600: one task.
        assert_eq!(a.add(&mut pending, |_| true, |_| false, 600, 100), BTreeSet::from([0]));
        assert_eq!(a.tasks.len(), 1);
        let mut pending: VecDeque<Assigned> = ["2", "3", "4", "5"].map(file).into();
        let changed = a.add(&mut pending, |_| true, |_| false, 3, 100);
        assert_eq!(changed, BTreeSet::from([0, 1, 2]));
        assert_eq!(a.tasks.iter().map(|t| ids(t)).collect::<Vec<_>>(), [vec!["1", "4"], vec!["2", "5"], vec!["3"]]);
    }

    #[test]
    fn new_files_go_to_the_least_loaded_task_and_others_stay() {
        let mut a = Assignment::default();
        let mut pending: VecDeque<Assigned> = ["1", "2", "3"].map(file).into();
        a.add(&mut pending, |_| true, |_| false, 3, 100);
        // Task 1's file finished: the next file goes to task 1 and task 1 drops it.
        let open = |f: &Assigned| f.id != "2";
        let before = a.clone();
        let mut pending: VecDeque<Assigned> = [file("6")].into();
        assert_eq!(a.add(&mut pending, open, |_| false, 3, 100), BTreeSet::from([1]));
        assert_eq!(ids(&a.tasks[1]), ["6"]);
        assert_eq!((&a.tasks[0], &a.tasks[2]), (&before.tasks[0], &before.tasks[2]));
        // A file already assigned and open is not added twice.
        let mut pending: VecDeque<Assigned> = [file("6")].into();
        assert!(a.add(&mut pending, open, |_| false, 3, 100).is_empty());
        assert!(pending.is_empty());
    }

    #[test]
    fn a_held_task_gets_no_new_file() {
        let mut a = Assignment::default();
        let mut pending: VecDeque<Assigned> = ["1", "2"].map(file).into();
        a.add(&mut pending, |_| true, |_| false, 2, 100);
        // Task 0 is held: new files go to task 1, even past task 0's share.
        let mut pending: VecDeque<Assigned> = ["3", "4"].map(file).into();
        assert_eq!(a.add(&mut pending, |_| true, |task| task == 0, 2, 100), BTreeSet::from([1]));
        assert_eq!(a.tasks.iter().map(|t| ids(t)).collect::<Vec<_>>(), [vec!["1"], vec!["2", "3", "4"]]);
        // With every task held (tasks.max reached), files wait.
        let mut pending: VecDeque<Assigned> = [file("5")].into();
        assert!(a.add(&mut pending, |_| true, |_| true, 2, 100).is_empty());
        assert_eq!(pending.len(), 1);
        // A held task does not stop a new one from opening below tasks.max.
        let mut b = Assignment::default();
        let mut pending: VecDeque<Assigned> = [file("1")].into();
        b.add(&mut pending, |_| true, |_| false, 3, 100);
        let mut pending: VecDeque<Assigned> = [file("2")].into();
        assert_eq!(b.add(&mut pending, |_| true, |task| task == 0, 3, 100), BTreeSet::from([1]));
    }

    #[test]
    fn a_full_window_leaves_files_waiting_and_idle_tasks_at_the_end_go() {
        let mut a = Assignment::default();
        let mut pending: VecDeque<Assigned> = ["1", "2", "3", "4", "5"].map(file).into();
        a.add(&mut pending, |_| true, |_| false, 2, 2);
        assert_eq!(a.tasks.iter().map(Vec::len).collect::<Vec<_>>(), [2, 2]);
        assert_eq!(ids(&pending.iter().cloned().collect::<Vec<_>>()), ["5"]);
        // Task 1's files finish: nothing changes until the tail is dropped.
        let open = |f: &Assigned| !["2", "4"].contains(&f.id.as_str());
        assert!(a.drop_idle_tail(open));
        assert_eq!(a.tasks.len(), 1);
        assert!(!a.drop_idle_tail(open));
    }

    #[test]
    fn a_file_read_again_by_another_task_leaves_no_live_entry_behind() {
        // What the connector knows: each file's current attempt, and whether it is assigned.
        let current = std::cell::RefCell::new(std::collections::HashMap::from([("1", 0), ("2", 0)]));
        let open = |f: &Assigned| current.borrow().get(f.id.as_str()) == Some(&f.attempt);
        let mut a = Assignment::default();
        let mut pending: VecDeque<Assigned> = ["1", "2"].map(file).into();
        a.add(&mut pending, open, |_| false, 2, 100);
        assert_eq!(a.tasks.iter().map(|t| ids(t)).collect::<Vec<_>>(), [vec!["1"], vec!["2"]]);
        // File 1 finishes, then grows: its next attempt waits while task 1 has less work.
        current.borrow_mut().remove("1");
        current.borrow_mut().remove("2");
        let again = Assigned { attempt: 1, ..file("1") };
        let mut pending: VecDeque<Assigned> = [again.clone()].into();
        assert_eq!(a.add(&mut pending, open, |_| false, 2, 100), BTreeSet::from([0]));
        assert_eq!(a.tasks[0], std::slice::from_ref(&again), "the same task: the finished attempt is replaced");
        current.borrow_mut().insert("1", 1);
        // Task 0's old attempt of a file now on task 1 is not open work of task 0.
        let mut b = Assignment { tasks: vec![vec![file("1"), file("3")], vec![again.clone()]] };
        current.borrow_mut().insert("3", 0);
        let mut pending: VecDeque<Assigned> = [file("4")].into();
        assert_eq!(b.add(&mut pending, open, |_| false, 2, 100), BTreeSet::from([0]));
        assert_eq!(ids(&b.tasks[0]), ["3", "4"], "the stale entry leaves the list that changes");
    }
}
