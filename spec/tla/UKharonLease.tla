----------------------------- MODULE UKharonLease -----------------------------
(***************************************************************************)
(* uKharon's leases on views with bounded clock drift (uKharon paper,      *)
(* section 6.2 Algorithm 2, section 6.3 compatible views, Appendix B's     *)
(* properties, Appendix C's drift; the views of crates/ukharon/src/view.rs *)
(* and docs/verification/tla.md).                                          *)
(*                                                                         *)
(* Coordinators decide views 0..MaxEpoch in order.  View k is decided at   *)
(* consensus index k, once index k is taken (accepted) at a majority of    *)
(* the coordinators; view k + 1 is proposed only once view k is decided    *)
(* (Appendix B.2: no gaps).  Each slot of each coordinator is empty or     *)
(* taken; Paxos itself, and which value is taken, are left out: Active     *)
(* only asks whether index k + 1 is empty.  A proposed view carries its    *)
(* lease duration and whether it is a compatible successor of the one      *)
(* before (same members and primary: the coordinators decide that).        *)
(*                                                                         *)
(* Nodes keep Algorithm 2's lease: the view leased, a start and an end on  *)
(* their own clock; Active(V) holds while the node leases V and its clock  *)
(* is in [start, end).  A call of Active(V), on a decided V at or after    *)
(* the view the node leases, takes a timestamp t (line 4), then, in a      *)
(* later step, finds index V + 1 empty at some majority (lines 6 and 10),  *)
(* and then sets the lease: a first lease on V starts at                   *)
(* t + Margin(wait) and ends there (line 7: an empty lease), an extension  *)
(* ends at t + Shrink(lease of V) (line 11).  A call may also give up at   *)
(* any moment (a read that found a taken slot, a crash).                   *)
(*                                                                         *)
(* Time.  A Tick is one unit of global time: every node's clock advances   *)
(* by R - 1, R or R + 1 local units, independently, so over k ticks a      *)
(* clock advances by k * R within +-k (a drift of 1/R, far above any real  *)
(* clock's, which only makes the margins larger).  A duration d is d local *)
(* units, d / R ticks at the nominal rate.  Margin(w) = ceil(w * (R+1)/R)  *)
(* lasts at least w / R ticks on the fastest clock, Shrink(l) =            *)
(* floor(l * (R-1)/R) at most l / R ticks on the slowest: the paper's      *)
(* "wait 1.01 delta" and "leases a few nanoseconds shorter" (section 6.2,  *)
(* Appendix C).  The other steps take no time: several may happen between  *)
(* two ticks.  Only durations matter (offsets are irrelevant), so a node   *)
(* keeps its lease and its pending timestamp relative to its clock: local  *)
(* units to the start and to the end (0: passed) and units elapsed since   *)
(* the timestamp, capped where every duration has passed.  With no global  *)
(* clock in the state, the state space is finite whatever the number of    *)
(* ticks: TLC checks behaviours of any length.  Every state is one instant *)
(* of global time, so an invariant over the nodes' current leases is a     *)
(* property of every global instant: NoOverlap is "no two incompatible     *)
(* views are active at the same global time".                              *)
(*                                                                         *)
(* The waiting rule.  A run is a maximal sequence of views each compatible *)
(* with the one before.  Hold(k) is the longest lease of views 0..k.  The  *)
(* first view f of a run waits Hold(f - 1): the longest lease of EVERY     *)
(* view before it, not only of the previous run, because coordinators may  *)
(* decide views faster than leases expire, so a lease on any earlier view  *)
(* may still be held.  A node moves to a compatible successor of the view  *)
(* it leases without waiting: the new lease keeps the start of its lease   *)
(* on the predecessor, which has waited for the run (Algorithm 2 line 7    *)
(* then makes it empty until an extension).  A node that does not lease   *)
(* the predecessor waits the run's wait, as for its first view.            *)
(*                                                                         *)
(* Mutations (Mutation = "none" is the protocol as above):                 *)
(*  "StartAtT": a first lease starts at t (no wait);                       *)
(*  "StampAfterRead": the timestamp is taken after the read;               *)
(*  "NoDriftMargin": Margin(w) = w and Shrink(l) = l;                      *)
(*  "ShortcutOnIncompatible": a node moves to an INCOMPATIBLE successor of *)
(*    the view it leases as to a compatible one, keeping its start;        *)
(*  "PreviousRunOnly": the first view of a run waits only the longest      *)
(*    lease of the previous run (the rule view.rs replaced);               *)
(*  "ShortcutWithoutLease": a compatible view waits 0 for every node, also *)
(*    for one that does not lease its predecessor (also replaced).        *)
(***************************************************************************)
EXTENDS Integers, FiniteSets, TLC

CONSTANTS
    Nodes,      \* the application nodes (model values, symmetric)
    Coords,     \* the coordinators (model values, symmetric)
    MaxEpoch,   \* views 0..MaxEpoch
    Leases,     \* the lease durations a view may carry, in local units
    R,          \* nominal local units per tick; clocks advance R-1..R+1 per tick
    Mutation

ASSUME MaxEpoch \in Nat /\ Leases \subseteq Nat \ {0} /\ Leases # {} /\ R \in Nat /\ R >= 2
ASSUME Mutation \in {"none", "StartAtT", "StampAfterRead", "NoDriftMargin",
                     "ShortcutOnIncompatible", "PreviousRunOnly", "ShortcutWithoutLease"}

Epochs == 0..MaxEpoch
None == -1
Max(S) == CHOOSE x \in S : \A y \in S : x >= y
MinOf(a, b) == IF a < b THEN a ELSE b
CeilDiv(a, b) == (a + b - 1) \div b

\* Durations adjusted for drift (section 6.2, Appendix C).
Margin(w) == IF Mutation = "NoDriftMargin" THEN w ELSE CeilDiv(w * (R + 1), R)
Shrink(l) == IF Mutation = "NoDriftMargin" THEN l ELSE (l * (R - 1)) \div R
\* Every relative time at or past Cap is as good as Cap: every duration has passed.
Cap == CeilDiv(Max(Leases) * (R + 1), R)
Rates == (R - 1)..(R + 1)
Phases == {"idle", "stamped", "read"}

VARIABLES
    proposed,   \* the highest epoch proposed (view 0 exists from the start)
    view,       \* view[k]: [lease, compat] of view k, for k <= proposed
    taken,      \* taken[c]: the indices taken at coordinator c
    lview,      \* lview[n]: the view n leases (None: none)
    toStart,    \* local units until the lease's start (0: started)
    toEnd,      \* local units until the lease's end (0: ended)
    phase,      \* phase[n]: where n's call of Active is
    pview,      \* pview[n]: the view n's call asks about
    elapsed,    \* local units since n's timestamp (capped at Cap)
    maxActive   \* history: the highest view ever active at some node (None: none yet)

vars == <<proposed, view, taken, lview, toStart, toEnd, phase, pview, elapsed, maxActive>>

IsMajority(Q) == 2 * Cardinality(Q) > Cardinality(Coords)
Decided(k) == k = 0 \/ (k <= proposed /\ IsMajority({c \in Coords : k \in taken[c]}))
\* Index i is empty at some majority (i past MaxEpoch is never taken).
EmptyAtMajority(i) == IsMajority({c \in Coords : i \notin taken[c]})

Compat(k) == k > 0 /\ view[k].compat
\* The first view of k's run.
RunFirst(k) == Max({f \in 0..k : ~Compat(f)})
Hold(k) == Max({view[i].lease : i \in 0..k})
RunLease(k) == Max({view[i].lease : i \in RunFirst(k)..k})
\* How long a node that does not lease k's predecessor waits before its first lease on k.
RunWait(k) ==
    LET f == RunFirst(k) IN
    IF f = 0 THEN 0
    ELSE IF Mutation = "PreviousRunOnly" THEN RunLease(f - 1)
    ELSE Hold(f - 1)
SameRun(v, w) == RunFirst(v) = RunFirst(w)

Active(n) == lview[n] # None /\ toStart[n] = 0 /\ toEnd[n] > 0
Clamp(x) == IF x < 0 THEN 0 ELSE IF x > Cap THEN Cap ELSE x

\* maxActive once the lease fields have become lv, ts and te.
NewMaxActive(lv, ts, te) ==
    Max({maxActive} \cup {lv[n] : n \in {m \in Nodes : lv[m] # None /\ ts[m] = 0 /\ te[m] > 0}})
\* A lease that ends at or before its start is not active until an extension moves its end,
\* whatever that end is: it is kept as 0 (this only merges states).
EndOf(ts, te) == IF te <= ts THEN 0 ELSE te

TypeOK ==
    /\ proposed \in Epochs
    /\ \A k \in 0..proposed : view[k] \in [lease : Leases, compat : BOOLEAN]
    /\ taken \in [Coords -> SUBSET (1..MaxEpoch)]
    /\ lview \in [Nodes -> Epochs \cup {None}]
    /\ toStart \in [Nodes -> 0..Cap]
    /\ toEnd \in [Nodes -> 0..Cap]
    /\ phase \in [Nodes -> Phases]
    /\ pview \in [Nodes -> Epochs]
    /\ elapsed \in [Nodes -> 0..Cap]
    /\ maxActive \in Epochs \cup {None}

Init ==
    /\ proposed = 0
    /\ \E l \in Leases : view = [k \in 0..0 |-> [lease |-> l, compat |-> FALSE]]
    /\ taken = [c \in Coords |-> {}]
    /\ lview = [n \in Nodes |-> None]
    /\ toStart = [n \in Nodes |-> 0]
    /\ toEnd = [n \in Nodes |-> 0]
    /\ phase = [n \in Nodes |-> "idle"]
    /\ pview = [n \in Nodes |-> 0]
    /\ elapsed = [n \in Nodes |-> 0]
    /\ maxActive = None

-----------------------------------------------------------------------------
(* Coordinators.                                                           *)

\* The leader proposes view k once view k - 1 is decided (no gaps).
Propose(k, l, compat) ==
    /\ k = proposed + 1
    /\ k <= MaxEpoch
    /\ Decided(k - 1)
    /\ proposed' = k
    /\ view' = [i \in 0..k |-> IF i = k THEN [lease |-> l, compat |-> compat] ELSE view[i]]
    /\ UNCHANGED <<taken, lview, toStart, toEnd, phase, pview, elapsed, maxActive>>

\* Coordinator c accepts the proposal at index k: its slot k is no longer empty.
\* When that decides view k, the calls stamped on view k - 1 can only fail (their read finds
\* index k taken at a majority): they are dropped, which only merges states.
Take(c, k) ==
    /\ k \in 1..proposed
    /\ k \notin taken[c]
    \* Once k is decided, more acceptances change no read's outcome: left out.
    /\ ~Decided(k)
    /\ taken' = [taken EXCEPT ![c] = @ \cup {k}]
    /\ IF IsMajority({d \in Coords : k \in taken'[d]})
          THEN LET dead == {n \in Nodes : phase[n] = "stamped"} IN
               /\ phase' = [n \in Nodes |-> IF n \in dead THEN "idle" ELSE phase[n]]
               /\ pview' = [n \in Nodes |-> IF n \in dead THEN 0 ELSE pview[n]]
               /\ elapsed' = [n \in Nodes |-> IF n \in dead THEN 0 ELSE elapsed[n]]
          ELSE UNCHANGED <<phase, pview, elapsed>>
    /\ UNCHANGED <<proposed, view, lview, toStart, toEnd, maxActive>>

-----------------------------------------------------------------------------
(* Nodes: Algorithm 2.                                                     *)

\* The views n may ask about: decided, not before the one it leases.
Askable(n) == {v \in 0..proposed : Decided(v) /\ (lview[n] = None \/ v >= lview[n])}

\* Whether n's first lease on v keeps the start of its lease on v's predecessor.
Keep(n, v) == lview[n] = v - 1 /\ (Compat(v) \/ Mutation = "ShortcutOnIncompatible")
\* How long n waits before its first lease on v when it does not keep a start.
Wait(v) == IF Compat(v) /\ Mutation = "ShortcutWithoutLease" THEN 0 ELSE RunWait(v)
\* How old n's timestamp may get before its age stops mattering: past it, the call's lease
\* is the same as from a timestamp this old (this only merges states).
AgeCap(n) ==
    LET v == pview[n] IN
    IF lview[n] = v THEN Shrink(view[v].lease)
    ELSE IF Keep(n, v) \/ Mutation = "StartAtT" THEN 0
    ELSE Margin(Wait(v))

\* The lease fields of n after its call on pview[n], whose timestamp is e local units old,
\* found index pview[n] + 1 empty.  Sets lview', toStart', toEnd'.
SetLease(n, e) ==
    LET v == pview[n] IN
    IF lview[n] = v THEN
        \* Extension (line 11): the end moves to t + Shrink(lease).
        /\ toEnd' = [toEnd EXCEPT ![n] = EndOf(toStart[n], Clamp(Shrink(view[v].lease) - e))]
        /\ UNCHANGED <<lview, toStart>>
    ELSE
        LET start == IF Keep(n, v) THEN toStart[n]
                     ELSE IF Mutation = "StartAtT" THEN 0
                     ELSE Clamp(Margin(Wait(v)) - e)
        IN
        \* First lease on v (line 7): it starts at `start` and ends there.
        /\ lview' = [lview EXCEPT ![n] = v]
        /\ toStart' = [toStart EXCEPT ![n] = start]
        /\ toEnd' = [toEnd EXCEPT ![n] = 0]

\* n's call ends; an idle node's pview and elapsed are 0 (this only merges states).
Idle(n) ==
    /\ phase' = [phase EXCEPT ![n] = "idle"]
    /\ pview' = [pview EXCEPT ![n] = 0]
    /\ elapsed' = [elapsed EXCEPT ![n] = 0]

RecordActive == maxActive' = NewMaxActive(lview', toStart', toEnd')

\* Line 4: the timestamp, taken before the read.
Stamp(n, v) ==
    /\ Mutation # "StampAfterRead"
    /\ phase[n] = "idle"
    /\ v \in Askable(n)
    \* A call on a view whose successor is decided can only fail: left out.
    /\ EmptyAtMajority(v + 1)
    /\ phase' = [phase EXCEPT ![n] = "stamped"]
    /\ pview' = [pview EXCEPT ![n] = v]
    /\ elapsed' = [elapsed EXCEPT ![n] = 0]
    /\ UNCHANGED <<proposed, view, taken, lview, toStart, toEnd, maxActive>>

\* Lines 6 and 10, then 7 or 11: index pview + 1 is empty at a majority; set the lease.
ReadAndSet(n) ==
    /\ phase[n] = "stamped"
    /\ EmptyAtMajority(pview[n] + 1)
    /\ SetLease(n, elapsed[n])
    /\ Idle(n)
    /\ RecordActive
    /\ UNCHANGED <<proposed, view, taken>>

\* Mutation StampAfterRead: the read first ...
ReadFirst(n, v) ==
    /\ Mutation = "StampAfterRead"
    /\ phase[n] = "idle"
    /\ v \in Askable(n)
    /\ EmptyAtMajority(v + 1)
    /\ phase' = [phase EXCEPT ![n] = "read"]
    /\ pview' = [pview EXCEPT ![n] = v]
    /\ UNCHANGED <<proposed, view, taken, lview, toStart, toEnd, elapsed, maxActive>>

\* ... then the timestamp, and the lease from it.
StampAndSet(n) ==
    /\ phase[n] = "read"
    /\ SetLease(n, 0)
    /\ Idle(n)
    /\ RecordActive
    /\ UNCHANGED <<proposed, view, taken>>

\* The call returns false or the node stops: nothing changes but the call.
GiveUp(n) ==
    /\ phase[n] # "idle"
    /\ Idle(n)
    /\ UNCHANGED <<proposed, view, taken, lview, toStart, toEnd, maxActive>>

\* One unit of global time: each clock advances by its own rate.
Tick ==
    \E rate \in [Nodes -> Rates] :
        /\ toStart' = [n \in Nodes |-> Clamp(toStart[n] - rate[n])]
        /\ toEnd' = [n \in Nodes |-> Clamp(toEnd[n] - rate[n])]
        /\ elapsed' = [n \in Nodes |->
                          IF phase[n] = "stamped" THEN MinOf(AgeCap(n), elapsed[n] + rate[n])
                          ELSE 0]
        /\ maxActive' = NewMaxActive(lview, toStart', toEnd')
        /\ UNCHANGED <<proposed, view, taken, lview, phase, pview>>

Next ==
    \/ \E k \in Epochs, l \in Leases, compat \in BOOLEAN : Propose(k, l, compat)
    \/ \E c \in Coords, k \in 1..MaxEpoch : Take(c, k)
    \/ \E n \in Nodes :
        \/ \E v \in Epochs : Stamp(n, v) \/ ReadFirst(n, v)
        \/ ReadAndSet(n)
        \/ StampAndSet(n)
        \/ GiveUp(n)
    \/ Tick

Spec == Init /\ [][Next]_vars

Sym == Permutations(Nodes) \cup Permutations(Coords)

-----------------------------------------------------------------------------
(* Properties (Appendix B).                                                *)

\* Theorem B.1 for incompatible views: no two views of different runs are active at the
\* same global time.  Views of one run may overlap: that is what compatible means.
NoOverlap ==
    \A n, m \in Nodes : Active(n) /\ Active(m) => SameRun(lview[n], lview[m])

\* Monotonicity (B.1): once a view was active somewhere, no earlier view of another run is.
\* Runs are intervals of epochs, so checking the highest view ever active covers every view
\* ever active above lview[n].
Monotonicity ==
    \A n \in Nodes : Active(n) /\ maxActive > lview[n] => SameRun(lview[n], maxActive)

\* A node leases only decided views (Algorithm 2: M is always a decided membership).
LeasedDecided == \A n \in Nodes : lview[n] # None => Decided(lview[n])
=============================================================================
