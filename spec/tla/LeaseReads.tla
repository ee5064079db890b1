------------------------------ MODULE LeaseReads ------------------------------
(***************************************************************************)
(* Leased local reads for Mu and Velos (docs/protocols/lease-reads.md):    *)
(* appointed leaders (rule 1), gated answers (rule 2) and local reads      *)
(* checked twice (rule 3), over an abstract log, with uKharon's guarantee  *)
(* taken as the environment (docs/verification/tla.md).                    *)
(*                                                                         *)
(* Views.  Views 0..MaxEpoch each name a primary by its unique id          *)
(* <<node, admission>>: a node removed and admitted again has a new id.    *)
(* The primary is the oldest member, so the views naming an id are         *)
(* consecutive.  Which view names whom is chosen at the start: deciding a  *)
(* view ahead of its activation changes nothing a replica can observe.     *)
(*                                                                         *)
(* Activeness.  uKharon's guarantee (UKharonLease.tla checks it) is the    *)
(* environment: at any instant at most one view is active, at everybody,   *)
(* and once a view has been active no earlier view is active again.  The   *)
(* state holds the active view `cur`, which only moves forward.  Gaps with *)
(* no view active are left out: a check that fails in a gap is a step not  *)
(* taken, and any step may be left out.                                    *)
(*                                                                         *)
(* The log.  Mu's agreement (Mu.tla, Velos.tla) is taken as given: there   *)
(* is one sequence of committed writes, and every applied state is a       *)
(* prefix of it, so a state is a length.  A term takes write permission    *)
(* from a majority, which revokes every other term's majority: the one     *)
(* replica that may commit is `perm`.  A term's catch-up adopts every      *)
(* committed write (its majority meets the majority of every commit); the  *)
(* term applies them at its first commit.  Any replica may start a term at *)
(* any moment (Mu's own detector, a stale appointment): such a term has no *)
(* id.  A term started while the active view names the replica's current   *)
(* id carries that id (rule 1).  A replica that lost its permissions goes  *)
(* on believing it leads, which is the adversary's best case.  Any replica *)
(* may apply the committed writes, as a follower does.                     *)
(*                                                                         *)
(* Answers.  `seen` is the longest committed prefix some client has        *)
(* observed: an answer to a write (or to a read through the log) shows the *)
(* answering replica's applied state, and so does an answered local read.  *)
(* A replica answers as soon as rule 2 lets it: a later answer only leaves *)
(* clients knowing less.  Every local read must return at least what was   *)
(* observed before its first check.                                        *)
(*                                                                         *)
(* Mutations (Mutation = "none" is the design):                            *)
(*  "NoSecondCheck": a local read is answered without its second check;    *)
(*  "NoFreshTerm": rule 1 broken: a term is matched to a view by node, not *)
(*    by id, so a replica admitted again under a new id keeps its old term;*)
(*  "NoTermCommit": a local read before the term's first commit;           *)
(*  "UngatedAnswer": rule 2 broken: every replica answers, named or not.   *)
(***************************************************************************)
EXTENDS Naturals, FiniteSets, TLC

CONSTANTS
    Nodes,      \* the replicas (model values, symmetric)
    MaxEpoch,   \* views 0..MaxEpoch
    MaxAdmit,   \* admissions 0..MaxAdmit: readmissions per node
    MaxWrites,  \* committed writes in all
    Mutation

ASSUME MaxEpoch \in Nat /\ MaxAdmit \in Nat /\ MaxWrites \in Nat
ASSUME Mutation \in {"none", "NoSecondCheck", "NoFreshTerm", "NoTermCommit", "UngatedAnswer"}

Epochs == 0..MaxEpoch
Lens == 0..MaxWrites
Ids == Nodes \X (0..MaxAdmit)
\* The primaries views 0..MaxEpoch may name.  The primary is the oldest member, so the views
\* naming an id are consecutive: each view names the primary of the view before or an id no
\* earlier view named.  A node's id <<n, a + 1>> comes after <<n, a>> (readmissions of ids no
\* view names are left out).
PrimarySequences ==
    {p \in [Epochs -> Ids] :
        \A k \in Epochs :
            /\ k > 0 => p[k] = p[k - 1] \/ \A j \in 0..(k - 1) : p[j] # p[k]
            /\ p[k][2] > 0 => \E j \in 0..(k - 1) : p[j] = <<p[k][1], p[k][2] - 1>>}
NoId == <<"none", 0>>
Nobody == "nobody"
Max(a, b) == IF a >= b THEN a ELSE b
MaxOf(S) == CHOOSE x \in S : \A y \in S : x >= y
ReadPhases == {"idle", "checked", "read", "answered"}

VARIABLES
    prim,     \* prim[k]: the id view k names (chosen at the start, never changed)
    adm,      \* adm[n]: n's admissions so far; its current id is <<n, adm[n]>>
    cur,      \* the active view: the latest view ever active
    perm,     \* the replica whose term holds permissions at a majority (Nobody: none yet)
    tId,      \* tId[n]: the id n's term was started under (NoId: not appointed)
    tCom,     \* tCom[n]: n's term has committed an entry of its own
    len,      \* the number of committed writes
    app,      \* app[n]: the length of n's applied prefix
    seen,     \* the longest prefix some client has observed
    rPh,      \* rPh[n]: where n's local read is
    rView,    \* rView[n]: the view of its first check
    rBefore,  \* rBefore[n]: seen at its first check
    rVal      \* rVal[n]: the length of the applied prefix it read

vars == <<prim, adm, cur, perm, tId, tCom, len, app, seen,
          rPh, rView, rBefore, rVal>>

CurId(n) == <<n, adm[n]>>
Active(v) == cur = v
\* Whether n's current id is named by the active view (rule 1 and rule 2's condition).
Appointed(n) == prim[cur] = CurId(n)
\* Rule 2, with answers as early as it allows: seen once the applied prefixes, the active view
\* and the admissions have become a, c and ad.  A named replica that only follows is let answer
\* too (a retry the store has applied): more answers only make the property harder.  Mutated:
\* every replica answers.
Answered(a, c, ad) ==
    LET named == {m \in Nodes : Mutation = "UngatedAnswer" \/ prim[c] = <<m, ad[m]>>}
        shown == {a[m] : m \in named}
    IN  Max(seen, IF shown = {} THEN 0 ELSE MaxOf(shown))
\* A replica no view names never reads locally and, under rule 2, never answers: only its
\* permissions matter.
Silent(n) == Mutation # "UngatedAnswer" /\ \A k \in Epochs : prim[k][1] # n
\* Rule 3's first condition: the term's id is the one the view names.  Mutated: by node only.
Names(v, id) ==
    IF Mutation = "NoFreshTerm" THEN id # NoId /\ prim[v][1] = id[1] ELSE prim[v] = id

TypeOK ==
    /\ prim \in [Epochs -> Ids]
    /\ adm \in [Nodes -> 0..MaxAdmit]
    /\ cur \in Epochs
    /\ perm \in Nodes \cup {Nobody}
    /\ tId \in [Nodes -> Ids \cup {NoId}]
    /\ tCom \in [Nodes -> BOOLEAN]
    /\ len \in Lens
    /\ app \in [Nodes -> Lens]
    /\ seen \in Lens
    /\ rPh \in [Nodes -> ReadPhases]
    /\ rView \in [Nodes -> Epochs]
    /\ rBefore \in [Nodes -> Lens]
    /\ rVal \in [Nodes -> Lens]

Init ==
    /\ prim \in PrimarySequences
    /\ adm = [n \in Nodes |-> 0]
    /\ cur = 0
    /\ perm = Nobody
    /\ tId = [n \in Nodes |-> NoId]
    /\ tCom = [n \in Nodes |-> FALSE]
    /\ len = 0
    /\ app = [n \in Nodes |-> 0]
    /\ seen = 0
    /\ rPh = [n \in Nodes |-> "idle"]
    /\ rView = [n \in Nodes |-> 0]
    /\ rBefore = [n \in Nodes |-> 0]
    /\ rVal = [n \in Nodes |-> 0]

ReadVars == <<rPh, rView, rBefore, rVal>>
LogVars == <<perm, tId, tCom, len, app, seen>>
ViewVars == <<prim, adm, cur>>

-----------------------------------------------------------------------------
(* The environment: views and uKharon's leases.                            *)

\* n is removed and admitted again: a new id.  Only an id some view names can be told from a
\* new one: the other readmissions are left out.  A node may learn that it was admitted again
\* while a view naming its old id is still active (views may be decided faster than leases
\* end): from then on that view does not name it.
Readmit(n) ==
    /\ adm[n] < MaxAdmit
    /\ <<n, adm[n] + 1>> \in {prim[k] : k \in Epochs}
    /\ adm' = [adm EXCEPT ![n] = @ + 1]
    /\ seen' = Answered(app, cur, adm')
    /\ UNCHANGED <<prim, cur, perm, tId, tCom, len, app, ReadVars>>

\* A later view becomes active; the active one never is again.
Activate(v) ==
    /\ v \in (cur + 1)..MaxEpoch
    /\ cur' = v
    /\ seen' = Answered(app, v, adm)
    /\ UNCHANGED <<prim, adm, perm, tId, tCom, len, app, ReadVars>>

-----------------------------------------------------------------------------
(* The log: terms, commits, gated answers (rules 1 and 2).                 *)

\* n takes permissions from a majority (revoking every other term's) and catches up.  The term
\* carries n's current id when the active view names it (rule 1), and no id otherwise.
StartTerm(n, appointed) ==
    /\ appointed => Appointed(n)
    /\ perm' = n
    /\ tId' = [tId EXCEPT ![n] = IF appointed THEN CurId(n) ELSE NoId]
    /\ tCom' = [tCom EXCEPT ![n] = FALSE]
    /\ UNCHANGED <<len, app, seen, ViewVars, ReadVars>>

\* The term holding a majority commits a write and applies its log: the catch-up and the write.
\* A silent replica's applied state and commits are kept as none (this only merges states).
Commit(n) ==
    /\ perm = n
    /\ len < MaxWrites
    /\ len' = len + 1
    /\ app' = IF Silent(n) THEN app ELSE [app EXCEPT ![n] = len + 1]
    /\ tCom' = IF Silent(n) THEN tCom ELSE [tCom EXCEPT ![n] = TRUE]
    /\ seen' = Answered(app', cur, adm)
    /\ UNCHANGED <<perm, tId, ViewVars, ReadVars>>

\* n applies every committed entry, as a follower does: a replica learns that entries are
\* committed whatever its term.  Applying a part only leaves n between two states it has anyway
\* (this only merges states).
Apply(n) ==
    /\ ~Silent(n)
    /\ app[n] < len
    /\ app' = [app EXCEPT ![n] = len]
    /\ seen' = Answered(app', cur, adm)
    /\ UNCHANGED <<perm, tId, tCom, len, ViewVars, ReadVars>>

-----------------------------------------------------------------------------
(* Local reads (rule 3), one step per condition.                           *)

\* Active(v) for a view naming the term's id, and the term has committed an entry of its own.
Check1(n, v) ==
    /\ rPh[n] = "idle"
    /\ Active(v)
    /\ Names(v, tId[n])
    /\ tCom[n] \/ Mutation = "NoTermCommit"
    /\ rPh' = [rPh EXCEPT ![n] = "checked"]
    /\ rView' = [rView EXCEPT ![n] = v]
    \* app[n] only grows: if it covers seen now, the read returns enough whatever happens, and
    \* rBefore is kept as 0 (this only merges states).
    /\ rBefore' = [rBefore EXCEPT ![n] = IF seen <= app[n] THEN 0 ELSE seen]
    /\ UNCHANGED <<rVal, LogVars, ViewVars>>

\* The applied state, read at once under the applier's lock.  From here on only whether
\* rBefore exceeds rVal matters: it is kept as 0 or rVal + 1 (this only merges states).
Read(n) ==
    /\ rPh[n] = "checked"
    /\ rPh' = [rPh EXCEPT ![n] = "read"]
    /\ rVal' = [rVal EXCEPT ![n] = app[n]]
    /\ rBefore' = [rBefore EXCEPT ![n] = IF @ <= app[n] THEN 0 ELSE app[n] + 1]
    /\ UNCHANGED <<rView, LogVars, ViewVars>>

\* Active(v) again, then the answer: the client observes the state read.  A read that returns
\* what it must ends there (n is idle again: this only merges states); one that misses an
\* observed write is kept as "answered", which LocalReadsLinearizable rules out.
Check2(n) ==
    /\ rPh[n] = "read"
    /\ Active(rView[n]) \/ Mutation = "NoSecondCheck"
    /\ seen' = Max(seen, rVal[n])
    /\ IF rBefore[n] <= rVal[n]
          THEN /\ rPh' = [rPh EXCEPT ![n] = "idle"]
               /\ rView' = [rView EXCEPT ![n] = 0]
               /\ rVal' = [rVal EXCEPT ![n] = 0]
               /\ UNCHANGED rBefore
          ELSE /\ rPh' = [rPh EXCEPT ![n] = "answered"]
               /\ UNCHANGED <<rView, rBefore, rVal>>
    /\ UNCHANGED <<perm, tId, tCom, len, app, ViewVars>>

\* A check failed: the GET goes through the log, answered under rule 2 (Answered covers it).
GiveUp(n) ==
    /\ rPh[n] \in {"checked", "read"}
    /\ rPh' = [rPh EXCEPT ![n] = "idle"]
    /\ rView' = [rView EXCEPT ![n] = 0]
    /\ rBefore' = [rBefore EXCEPT ![n] = 0]
    /\ rVal' = [rVal EXCEPT ![n] = 0]
    /\ UNCHANGED <<LogVars, ViewVars>>

Next ==
    \/ \E v \in Epochs : Activate(v)
    \/ \E n \in Nodes :
        \/ Readmit(n)
        \/ \E appointed \in BOOLEAN : StartTerm(n, appointed)
        \/ Commit(n)
        \/ Apply(n)
        \/ \E v \in Epochs : Check1(n, v)
        \/ Read(n)
        \/ Check2(n)
        \/ GiveUp(n)

Spec == Init /\ [][Next]_vars

Sym == Permutations(Nodes)

-----------------------------------------------------------------------------
(* Properties.                                                             *)

\* An answered local read returns every write some client observed before its first check:
\* every acknowledged write, and everything an earlier read returned.  Reads return prefixes of
\* one committed sequence, so this is linearizability of the local reads.
LocalReadsLinearizable ==
    \A n \in Nodes : rPh[n] = "answered" => rBefore[n] <= rVal[n]

\* A local read returns committed writes only.
LocalReadsCommitted ==
    \A n \in Nodes : rPh[n] \in {"read", "answered"} => rVal[n] <= len

\* Every answer shows committed writes only.
SeenCommitted == seen <= len
=============================================================================
