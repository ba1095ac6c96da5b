//! Ids derived from what they identify: an execution of a slot, a run of a slot, a task of a
//! run (docs/guarantees.md, G1).
//!
//! Invariants: the same key gives the same id on every node and in every release (the id is
//! written to the store, so a second write of the same slot conflicts on the primary key);
//! the id's leading 48 bits are the slot in milliseconds since the Unix epoch (UTC), so the
//! ids of a store sort by slot as text, the layout a history ranged by id needs
//! (ARCHITECTURE.md, "History partitions"); ids of different keys differ except with the
//! odds of a 74-bit collision of SHA-1. Ids made at random (`Uuid::now_v7`, a manual run)
//! share the time layout, so both kinds sort together by their instant.

use jiff::Timestamp;
use uuid::Uuid;

/// The name space of derived ids: a fixed random UUID, never to change, since the store holds
/// ids made with it. SHA-1 of it and the key (RFC 9562 §5.5) gives an id's low bits.
pub const NAMESPACE: Uuid = Uuid::from_u128(0x6f1d_2c4e_93a8_4b5e_a4f1_7d0c_3e2b_9a51);

/// The id of the execution of job incarnation `job_uid` for `slot` (a `schedule` or
/// `misfire` execution): UUIDv8 text (RFC 9562 §5.8), lowercase and hyphenated, whose leading
/// 48 bits are `slot` in Unix milliseconds and whose other 74 free bits are SHA-1 of
/// `"slot\n{job_uid}\n{slot_ms}"` in [`NAMESPACE`]. Slots before 1970 or after 10889 clamp
/// their time bits (the key still tells them apart).
pub fn slot_execution_id(job_uid: &str, slot: Timestamp) -> String {
    derived(&format!("slot\n{job_uid}\n{}", slot.as_millisecond()), slot)
}

/// The id of workflow incarnation `workflow_uid`'s run for `slot`: as
/// [`slot_execution_id`], with the key `"run\n{workflow_uid}\n{slot_ms}"`.
pub fn slot_run_id(workflow_uid: &str, slot: Timestamp) -> String {
    derived(
        &format!("run\n{workflow_uid}\n{}", slot.as_millisecond()),
        slot,
    )
}

/// The id of task `task`'s execution in run `run_id`, whose slot is `slot`: as
/// [`slot_execution_id`], with the key `"task\n{run_id}\n{task}"` and `slot`'s time bits, so
/// a run's tasks sort with it.
pub fn task_execution_id(run_id: &str, task: &str, slot: Timestamp) -> String {
    derived(&format!("task\n{run_id}\n{task}"), slot)
}

/// SHA-1 of `key` in [`NAMESPACE`] (RFC 9562 §5.5), its leading 48 bits replaced by `slot`.
fn derived(key: &str, slot: Timestamp) -> String {
    with_time(*Uuid::new_v5(&NAMESPACE, key.as_bytes()).as_bytes(), slot)
}

fn with_time(mut bytes: [u8; 16], slot: Timestamp) -> String {
    let ms = u64::try_from(slot.as_millisecond())
        .unwrap_or(0)
        .min((1 << 48) - 1);
    bytes[..6].copy_from_slice(&ms.to_be_bytes()[2..]);
    uuid::Builder::from_custom_bytes(bytes)
        .into_uuid()
        .hyphenated()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millisecond(ms).expect("instant")
    }

    #[test]
    fn a_slot_s_id_is_stable_versioned_and_led_by_its_time() {
        let id = slot_execution_id("job-uid", at(1_790_000_000_000));
        // Fixed across releases: the store holds it.
        assert_eq!(id, slot_execution_id("job-uid", at(1_790_000_000_000)));
        let u = Uuid::parse_str(&id).expect("uuid");
        assert_eq!(u.get_version_num(), 8);
        assert_eq!(u.get_variant(), uuid::Variant::RFC4122);
        assert!(id.starts_with("01a0c450-6c00-8"), "{id}");
        assert_ne!(id, slot_run_id("job-uid", at(1_790_000_000_000)));
        assert_ne!(
            id,
            task_execution_id("job-uid", "1790000000000", at(1_790_000_000_000))
        );
    }

    #[test]
    fn the_reference_vector_holds() {
        // A change here changes every stored slot's id: never edit it. Computed apart with
        // Python: uuid5(NAMESPACE, key), its first 6 bytes the slot, version 8, RFC variant.
        assert_eq!(
            slot_execution_id(
                "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b",
                at(1_767_225_600_000)
            ),
            "019b76da-a800-86a6-b7a5-364e9acf9942",
        );
    }

    proptest! {
        #[test]
        fn ids_sort_as_text_by_slot(a in 0i64..4_000_000_000_000, b in 0i64..4_000_000_000_000) {
            let (x, y) = (slot_execution_id("j", at(a)), slot_execution_id("j", at(b)));
            if a < b { prop_assert!(x < y); }
            if a > b { prop_assert!(x > y); }
            if a == b { prop_assert_eq!(x, y); }
        }

        #[test]
        fn different_keys_give_different_ids(u in "[a-z0-9-]{1,40}", v in "[a-z0-9-]{1,40}", t in 0i64..4_000_000_000_000) {
            prop_assume!(u != v);
            prop_assert_ne!(slot_execution_id(&u, at(t)), slot_execution_id(&v, at(t)));
            prop_assert_ne!(task_execution_id("run", &u, at(t)), task_execution_id("run", &v, at(t)));
        }
    }
}
