//! Sorting init's lists (directory entries, interfaces, partitions,
//! disks, manifests) through one sort.
//!
//! Why: each `sort`, `sort_by` or `sort_by_key` call on another element
//! type or with another closure is its own copy of std's sort, about
//! 4.5 kB of machine code each, and PID 1 has a size budget (2 MB,
//! images/build-boot.sh). Every list here is short and sorted once, so
//! [`by_key`] turns each element into a byte key, sorts the
//! `(key, position)` pairs with a single shared instantiation and moves
//! the elements into that order. The position breaks ties, so the sort
//! is stable like `sort_by_key`.
//!
//! The keys order exactly as the types they stand for: a `String` by its
//! bytes (as `str` compares), a number by its big-endian bytes, and a
//! path by [`path_key`], which compares component by component as
//! `Path` does.

use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

/// Sorts `items` by the byte key `key` gives each, keeping items with
/// equal keys in their order.
pub fn by_key<T>(items: &mut Vec<T>, key: impl Fn(&T) -> Vec<u8>) {
    let mut keyed: Vec<(Vec<u8>, usize)> = items.iter().map(key).zip(0..).collect();
    sort_keys(&mut keyed);
    let mut slots: Vec<Option<T>> = std::mem::take(items).into_iter().map(Some).collect();
    items.extend(
        keyed
            .iter()
            .filter_map(|(_, at)| slots.get_mut(*at).and_then(Option::take)),
    );
}

/// The one sort every list goes through. Not generic and never inlined,
/// so it exists once in the binary.
#[inline(never)]
fn sort_keys(keys: &mut [(Vec<u8>, usize)]) {
    keys.sort_unstable();
}

/// A text's key: its UTF-8 bytes, which order as `str` does.
pub fn text_key(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

/// A path's key. Each component becomes a tag byte (root, `.`, `..` and
/// names in the order `Component` sorts them) followed, for a name, by
/// its bytes, and components are joined by a zero byte, which no name
/// contains and which sorts first. Comparing two keys is then comparing
/// the paths component by component, as `Path`'s `Ord` does: "a/x"
/// sorts before "a-b" and "a" before "a/b".
pub fn path_key(p: &Path) -> Vec<u8> {
    let mut key = Vec::new();
    for (i, c) in p.components().enumerate() {
        if i > 0 {
            key.push(0);
        }
        match c {
            Component::Prefix(prefix) => {
                key.push(1);
                key.extend_from_slice(prefix.as_os_str().as_bytes());
            }
            Component::RootDir => key.push(2),
            Component::CurDir => key.push(3),
            Component::ParentDir => key.push(4),
            Component::Normal(name) => {
                key.push(5);
                key.extend_from_slice(name.as_bytes());
            }
        }
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn texts_sort_as_strings_do_and_ties_keep_their_order() {
        let mut v: Vec<(String, u8)> = ["b", "a", "ä", "B", "a", ""]
            .iter()
            .zip(0..)
            .map(|(s, i)| ((*s).to_owned(), i))
            .collect();
        let mut want = v.clone();
        want.sort_by(|x, y| x.0.cmp(&y.0));
        by_key(&mut v, |e| text_key(&e.0));
        assert_eq!(v, want);
        // "" and "B" first; the two "a" in the order they came.
        assert_eq!(v[2], ("a".to_owned(), 1));
        assert_eq!(v[3], ("a".to_owned(), 4));
    }

    #[test]
    fn numbers_sort_by_their_big_endian_bytes() {
        let mut v = vec![300u32, 2, 70_000, 0, 2];
        by_key(&mut v, |n| n.to_be_bytes().to_vec());
        assert_eq!(v, [0, 2, 2, 300, 70_000]);
    }

    #[test]
    fn paths_sort_as_path_does() {
        let paths = [
            "a-b", "a/x", "a", "a/b/c", "/x", "/", "./a", "../a", "a//b", "ab", "a/b", "", "/a/b",
            "/a-b",
        ];
        let mut v: Vec<PathBuf> = paths.iter().map(PathBuf::from).collect();
        let mut want = v.clone();
        want.sort();
        by_key(&mut v, |p| path_key(p));
        assert_eq!(v, want);
        for a in &paths {
            for b in &paths {
                assert_eq!(
                    path_key(Path::new(a)).cmp(&path_key(Path::new(b))),
                    Path::new(a).cmp(Path::new(b)),
                    "{a} vs {b}"
                );
            }
        }
    }
}
