use std::fmt;

/// Remote access rights, as RDMA access flags: on a region (what any peer may ever do to it) and on
/// one side of a connection (what that connection's peer may do now).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access(u8);

impl Access {
    /// No remote access.
    pub const NONE: Access = Access(0);
    /// Remote reads.
    pub const READ: Access = Access(1);
    /// Remote writes.
    pub const WRITE: Access = Access(2);
    /// Remote compare-and-swap.
    pub const ATOMIC: Access = Access(4);
    /// Read and write.
    pub const READ_WRITE: Access = Access(1 | 2);
    /// Everything.
    pub const ALL: Access = Access(1 | 2 | 4);

    /// The flags as bits (read = 1, write = 2, atomic = 4).
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// Flags from bits; unknown bits are dropped.
    pub const fn from_bits_truncate(bits: u8) -> Access {
        Access(bits & Access::ALL.0)
    }

    /// Whether every flag of `other` is set here.
    pub const fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }

    /// Flags set in either.
    pub const fn union(self, other: Access) -> Access {
        Access(self.0 | other.0)
    }

    /// Flags set here and not in `other`.
    pub const fn minus(self, other: Access) -> Access {
        Access(self.0 & !other.0)
    }

    /// Whether `self` takes away a right that `before` had: such a change is a revocation and must
    /// wait for in-flight operations.
    pub const fn revokes_from(self, before: Access) -> bool {
        before.0 & !self.0 != 0
    }
}

impl fmt::Debug for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == 0 {
            return f.write_str("none");
        }
        let mut first = true;
        for (flag, name) in
            [(Access::READ, "read"), (Access::WRITE, "write"), (Access::ATOMIC, "atomic")]
        {
            if self.contains(flag) {
                if !first {
                    f.write_str("+")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::Access;

    #[test]
    fn revocation_is_any_lost_right() {
        assert!(Access::READ.revokes_from(Access::READ_WRITE));
        assert!(!Access::ALL.revokes_from(Access::READ_WRITE));
        assert!(!Access::READ_WRITE.revokes_from(Access::READ_WRITE));
        assert_eq!(Access::ALL.minus(Access::WRITE), Access::from_bits_truncate(5));
        assert_eq!(Access::from_bits_truncate(0xff), Access::ALL);
        assert_eq!(Access::READ_WRITE.to_string(), "read+write");
    }
}
