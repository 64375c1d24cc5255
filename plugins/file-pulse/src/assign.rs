//! Stable assignment of files to tasks: a task keeps its unfinished files when new ones
//! arrive, and each new file goes to the task with the fewest unfinished files, so only
//! the tasks that receive files get a new config (and are restarted by the host).

use std::collections::BTreeSet;

use crate::offset::FileKey;

/// `tasks[i]` = files of task `i`, in assignment order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Assignment {
    pub tasks: Vec<Vec<FileKey>>,
}

impl Assignment {
    pub fn new(task_count: usize) -> Self {
        Assignment { tasks: vec![Vec::new(); task_count.max(1)] }
    }

    pub fn contains(&self, file: &FileKey) -> bool {
        self.tasks.iter().any(|files| files.contains(file))
    }

    pub fn task_of(&self, file: &FileKey) -> Option<usize> {
        self.tasks.iter().position(|files| files.contains(file))
    }

    /// Adds `new` files. A task that receives files also drops its `finished` ones (its
    /// config changes anyway); other tasks are left exactly as they were. Returns the
    /// tasks whose file list changed.
    pub fn add(&mut self, new: &[FileKey], finished: &BTreeSet<FileKey>) -> BTreeSet<usize> {
        let mut changed = BTreeSet::new();
        for file in new {
            if self.contains(file) {
                continue;
            }
            let load = |files: &Vec<FileKey>| files.iter().filter(|f| !finished.contains(f)).count();
            let (task, _) =
                self.tasks.iter().enumerate().min_by_key(|(i, files)| (load(files), *i)).expect("at least one task");
            self.tasks[task].push(file.clone());
            changed.insert(task);
        }
        for &task in &changed {
            self.tasks[task].retain(|f| !finished.contains(f));
        }
        changed
    }

    /// Removes files that are gone for good (finished and cleaned up) from tasks that
    /// hold nothing else, so idle tasks do not keep stale lists forever.
    pub fn drop_if_all_finished(&mut self, finished: &BTreeSet<FileKey>) -> BTreeSet<usize> {
        let mut changed = BTreeSet::new();
        for (task, files) in self.tasks.iter_mut().enumerate() {
            if !files.is_empty() && files.iter().all(|f| finished.contains(f)) {
                files.clear();
                changed.insert(task);
            }
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> FileKey {
        FileKey { path: name.into(), id: name.into() }
    }

    #[test]
    fn new_files_go_to_the_least_loaded_task_and_others_stay() {
        let mut a = Assignment::new(3);
        let changed = a.add(&[key("1"), key("2"), key("3"), key("4")], &BTreeSet::new());
        assert_eq!(changed, BTreeSet::from([0, 1, 2]));
        assert_eq!(a.tasks, vec![vec![key("1"), key("4")], vec![key("2")], vec![key("3")]]);
        // Task 1's file finished: the next file goes to task 1 (fewest unfinished)
        // and task 1 drops its finished file; tasks 0 and 2 are untouched.
        let finished = BTreeSet::from([key("2")]);
        let before = a.clone();
        let changed = a.add(&[key("5")], &finished);
        assert_eq!(changed, BTreeSet::from([1]));
        assert_eq!(a.tasks[1], vec![key("5")]);
        assert_eq!((&a.tasks[0], &a.tasks[2]), (&before.tasks[0], &before.tasks[2]));
        // Known files are not added twice.
        assert!(a.add(&[key("5")], &finished).is_empty());
    }

    #[test]
    fn idle_tasks_drop_finished_lists() {
        let mut a = Assignment::new(2);
        a.add(&[key("1"), key("2")], &BTreeSet::new());
        let changed = a.drop_if_all_finished(&BTreeSet::from([key("1")]));
        assert_eq!(changed, BTreeSet::from([0]));
        assert!(a.tasks[0].is_empty());
        assert_eq!(a.tasks[1], vec![key("2")]);
    }
}
