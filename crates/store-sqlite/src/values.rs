//! Multi-row `VALUES` lists for the batched writes (trigger commits, completion batches).
//!
//! A batch of N rows runs as a few statements whose sizes come from [`CHUNKS`], largest
//! first, so whatever N is, only `CHUNKS.len()` distinct texts exist per statement and each is
//! prepared once per connection (sqlx caches prepared statements by their text). Binding
//! each value is far cheaper than the alternative of one JSON array parameter read with
//! `json_each` and `->>`, which re-parses every row once per column: 2,500 execution rows
//! took 48 ms that way and 6 ms as 512-row `VALUES` statements, in a measurement with
//! Python's `sqlite3` on the development machine; a statement prepared anew for each batch
//! cost 25 ms (BENCHMARKS.md, "Multi-row VALUES lists on SQLite").
//!
//! Invariants: parameters are anonymous (`?`), bound in the order they appear, row by row;
//! a value a statement needs in every row (a shared instant, the node) is bound in every row.
//! Numbered parameters (`?NNN`) would make binding quadratic: sqlx asks SQLite for each
//! parameter's name, and SQLite finds it by a linear search of the statement's named
//! parameters (`sqlite3VListNumToName`); a 256-row batch has thousands. The largest chunk
//! keeps `rows * columns` under SQLite's 32,766 parameters for every statement here.

/// Rows per statement, largest first: a batch of 2,500 rows runs as 9 × 256 + 3 × 64 + 1 × 4,
/// 13 statements; whatever the batch, at most 12 beyond its 256-row ones.
const CHUNKS: [usize; 5] = [256, 64, 16, 4, 1];

/// The sizes of the statements that write `n` rows: greedy over [`CHUNKS`], summing to `n`.
fn chunk_sizes(n: usize) -> Vec<usize> {
    let mut sizes = Vec::new();
    let mut left = n;
    for size in CHUNKS {
        while left >= size {
            sizes.push(size);
            left -= size;
        }
    }
    sizes
}

/// `items` cut into consecutive slices of the sizes [`chunk_sizes`] gives, one per statement.
pub(crate) fn chunks<T>(items: &[T]) -> impl Iterator<Item = &[T]> {
    let mut rest = items;
    chunk_sizes(items.len()).into_iter().map(move |size| {
        let (head, tail) = rest.split_at(size);
        rest = tail;
        head
    })
}

/// `(?, ?), (?, ?), (?, ?)`: `rows` tuples of `columns` anonymous parameters.
pub(crate) fn values_list(rows: usize, columns: usize) -> String {
    let tuple = format!("({})", vec!["?"; columns].join(", "));
    vec![tuple; rows].join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_sizes_cover_the_batch_with_few_statements() {
        for n in 0..3000 {
            let sizes = chunk_sizes(n);
            assert_eq!(sizes.iter().sum::<usize>(), n);
            assert!(sizes.windows(2).all(|w| w[0] >= w[1]), "largest first");
            assert!(sizes.len() <= n / 256 + 12, "{n}: {sizes:?}");
        }
        assert_eq!(
            chunk_sizes(2500),
            [[256; 9].as_slice(), &[64; 3], &[4]].concat()
        );
    }

    #[test]
    fn chunks_cut_the_items_in_order_without_gaps() {
        let items: Vec<usize> = (0..301).collect();
        let parts: Vec<&[usize]> = chunks(&items).collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            chunk_sizes(301)
        );
        assert_eq!(parts.concat(), items);
    }

    #[test]
    fn values_list_has_one_tuple_per_row() {
        assert_eq!(values_list(2, 3), "(?, ?, ?), (?, ?, ?)");
        assert_eq!(values_list(1, 1), "(?)");
    }

    #[test]
    fn the_largest_statement_stays_under_sqlites_parameter_limit() {
        // 18 columns per execution row (the widest statement here).
        assert!(CHUNKS[0] * 18 <= 32_766);
    }
}
