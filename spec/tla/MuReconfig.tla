------------------------------ MODULE MuReconfig ------------------------------
(***************************************************************************)
(* Mu's membership changes (Mu, OSDI 2020, section 5.4) on top of its      *)
(* replication plane and permission manager (sections 4 and 5.2, as        *)
(* spec/tla/Mu.tla models them).                                           *)
(*                                                                         *)
(* Replicas are 1..N, the universe: every replica that may ever be a       *)
(* member.  Init is the initial configuration; replicas outside it exist   *)
(* from the start (with an empty log and a permission manager), so they    *)
(* can be added.  A value is a leader attempt's own value, and it may      *)
(* carry a membership change (one of Changes): a membership entry.  The    *)
(* configuration that decides slot s is Init changed by the membership     *)
(* entries decided below s, in slot order; applying a change is total (one *)
(* that does not apply changes nothing).                                   *)
(*                                                                         *)
(* A leader works under the configuration its log gives at its FUO: it     *)
(* leads only if that configuration includes it, asks only its members for *)
(* permission, counts only their grants and answers, and needs a majority  *)
(* of it to confirm, prepare and commit.  Whenever the configuration its   *)
(* log gives changes (it commits a membership entry, or catch-up copies    *)
(* one), it starts over from permissions under the new one; after a        *)
(* commit it first writes its FUO to its confirmed followers.  One entry   *)
(* is in flight at a time, so a membership entry travels alone.            *)
(*                                                                         *)
(* The rest is Mu.tla's protocol as implemented: revoke then grant, the    *)
(* leader's fence before it asks a replica again, and writes that must     *)
(* fail left out (SkipDoomedWrites, the reduction Mu.tla explains).        *)
(*                                                                         *)
(* Variants.  TwoAtOnce = TRUE: an entry changes two replicas at once      *)
(* (adds two, removes two, or replaces one), so that majorities of the old *)
(* and the new configuration may be disjoint.  EarlyConfig = TRUE: the     *)
(* rejected rule that takes a configuration into use as soon as its entry  *)
(* is in the log, decided or not (Raft's): a leader works under the        *)
(* configuration its whole log gives, and starts over under it as soon as  *)
(* it writes the entry.  StartOver: the occasions on which a leader starts *)
(* over under a new configuration, {"commit", "catchup"} as implemented;   *)
(* leaving one out is a mutation, and the leader then goes on under the    *)
(* configuration and confirmed followers it has.                           *)
(***************************************************************************)
EXTENDS Naturals, FiniteSets, Sequences

CONSTANTS
    N,                  \* replicas in the universe, 1..N
    Init,               \* the initial configuration
    Leaders,            \* the replicas that may lead (a subset, to keep the model small)
    S,                  \* number of log slots
    MaxAttempts,        \* leader attempts in all: starts, and starts over after an abort
    Additions,          \* the replicas a membership entry may add
    Removals,           \* the replicas a membership entry may remove
    TwoAtOnce,          \* TRUE: mutated, an entry changes two replicas at once
    EarlyConfig,        \* TRUE: mutated, a configuration is in use once its entry is in the log
    StartOver,          \* when a leader starts over under a new configuration (mutated: fewer)
    SkipDoomedWrites    \* TRUE: writes that must fail are not posted (Mu.tla's reduction)

R        == 1..N
Slots    == 1..S
Attempts == 1..MaxAttempts
Max(a, b) == IF a >= b THEN a ELSE b

ASSUME N \in Nat \ {0} /\ S \in Nat \ {0} /\ MaxAttempts \in Nat
ASSUME Init \subseteq R /\ Init # {} /\ Leaders \subseteq R
ASSUME Additions \subseteq R /\ Removals \subseteq R
ASSUME TwoAtOnce \in BOOLEAN /\ EarlyConfig \in BOOLEAN
ASSUME StartOver \subseteq {"commit", "catchup"}
ASSUME SkipDoomedWrites \in BOOLEAN

-----------------------------------------------------------------------------
(* Configurations.                                                         *)

NoChange == [add |-> {}, rem |-> {}]

\* The changes leaders may propose, as the replicas they add and remove: one replica per entry
\* (Change::Add, Change::Remove), or with TwoAtOnce two replicas per entry (adding two,
\* removing two, or replacing one by another).
Changes ==
    {ch \in [add : SUBSET Additions, rem : SUBSET Removals] :
        Cardinality(ch.add) + Cardinality(ch.rem) = IF TwoAtOnce THEN 2 ELSE 1}

\* C after a membership entry carrying ch: ch where it is a change of C, C otherwise
\* (membership::apply: adding a member, removing a non-member, or removing the last member
\* changes nothing).  A two-replica change applies whole or not at all.
Apply(C, ch) ==
    LET D == (C \ ch.rem) \cup ch.add IN
    IF ch.add \cap C = {} /\ ch.rem \subseteq C /\ D # {} THEN D ELSE C

\* Q holds a majority of configuration C (only C's members count).
IsMajority(Q, C) == 2 * Cardinality(Q \cap C) > Cardinality(C)

\* A value: the attempt that proposed it (values of different attempts differ), and the change
\* it carries (NoChange: an ordinary entry).
Values   == [a : Attempts, c : {NoChange} \cup Changes]
NoValue  == [a |-> 0, c |-> NoChange]
Empty    == [b |-> 0, v |-> NoValue]

\* A proposal number above m that only leader l uses (Mu.tla's NewBallot).
NewBallot(m, l) == (m \div N + 1) * N + (l - 1)
\* Each prepare picks a number at most N above every number used before it.  A leader prepares
\* at most once per slot in a permission round, and has at most S rounds besides its attempts
\* (one each time the configuration its log gives changes, which takes its FUO forward; with
\* EarlyConfig it may have more, and TypeOK says if the bound is passed).
MaxRounds == MaxAttempts + Cardinality(Leaders) * S
MaxBallot == (MaxRounds * S + 1) * N + N
Ballots  == 0..MaxBallot
Entries  == [b : Ballots, v : Values \cup {NoValue}]

\* The configuration after the entries of log lg in slots 1..i, applied in slot order from Init.
RECURSIVE ConfUpTo(_, _)
ConfUpTo(lg, i) == IF i = 0 THEN Init ELSE Apply(ConfUpTo(lg, i - 1), lg[i].v.c)

\* The configuration a log lg with FUO f gives: that of the entries below f, which are decided
\* (Leader::members_at_fuo).  EarlyConfig: that of every entry in the log, decided or not.
ConfigOf(lg, f) == IF EarlyConfig THEN ConfUpTo(lg, S) ELSE ConfUpTo(lg, f - 1)

\* What is chosen, from the history A of every acceptance <<slot, proposal, value, replica>>.
\* F[s].cfgs: the configurations slot s may have, Init changed by one chosen value of each slot
\* below s; F[s].vals: the values accepted at s with one proposal number by a majority of one of
\* them.  While at most one value is chosen at each slot below s, F[s].cfgs holds one
\* configuration, the one the chosen prefix below s defines, so at the lowest slot where two
\* values are chosen, both are chosen in that one configuration.  Nothing is chosen above a slot
\* at which nothing is chosen yet: the configuration there is not defined until it is.  Every
\* set only grows with A, so a value once chosen stays chosen.
ChosenInfo(A) ==
    LET F[s \in Slots] ==
          LET cfgs == IF s = 1 THEN {Init}
                      ELSE {Apply(c, v.c) : c \in F[s - 1].cfgs, v \in F[s - 1].vals}
              here == {e \in A : e[1] = s}
              ok(e) == \E c \in cfgs : IsMajority({q \in R : <<s, e[2], e[3], q>> \in A}, c)
          IN [cfgs |-> cfgs, vals |-> {e[3] : e \in {e \in here : ok(e)}}]
    IN F

Phases == {"idle",     \* not leading
           "perm",     \* Listing 2 lines 9-12: requests sent, collecting grants
           "update",   \* Listing 4: update-followers writes in flight
           "pread",    \* ready to prepare the slot at the FUO
           "pwrite",   \* Listing 2 line 22: minProposal writes in flight
           "accept",   \* Listing 2 line 31: accept writes in flight
           "end"}      \* every slot decided

VARIABLES
    \* ---- replica memory (Listing 1) ----
    log,        \* log[r][s]: the (proposal, value) in slot s of r's log; Empty if none
    minProp,    \* minProp[r]: r's minProposal
    fuo,        \* fuo[r]: r's first undecided offset, in 1..S+1
    \* ---- permission managers (section 5.2) ----
    writers,    \* writers[r]: the replicas that may write r's log now
    reqs,       \* reqs[r]: the replicas whose permission requests to r are pending
    \* ---- leaders ----
    attempts,   \* leader attempts started so far
    att,        \* att[l]: l's current attempt (0: never led)
    phase,      \* phase[l]
    mem,        \* mem[l]: the configuration l leads under ({} while idle)
    conf,       \* conf[l]: l's confirmed followers, l included
    done,       \* done[l]: who answered l's current step (grants, update, prepare, accept)
    bal,        \* bal[l]: l's proposal number, the last one it picked
    prepared,   \* prepared[l]: l omits prepare (it found only empty slots)
    deferred,   \* deferred[l]: replicas l asks for access once its writes to them are done
    \* ---- the network ----
    net,        \* net[l][r]: l's writes to r's log in flight, oldest first
    \* ---- history, for the properties only ----
    acc,        \* every acceptance: <<slot, proposal, value, replica>>
    chosen,     \* chosen[s]: the values chosen at s (ChosenInfo), kept up to date with acc
    committed   \* committed[s]: the values leaders committed at s

replicaVars == <<log, minProp, fuo>>
permVars    == <<writers, reqs>>
leaderVars  == <<attempts, att, phase, mem, conf, done, bal, prepared, deferred>>
hist        == <<acc, chosen, committed>>
vars        == <<replicaVars, permVars, leaderVars, net, hist>>

OpOK(op) == /\ op.k \in {"upd", "mp", "acc", "fuo"}
            /\ op.a \in BOOLEAN
            /\ op.s \in 1..S+1 /\ op.f \in 1..S+1
            /\ op.b \in Ballots /\ op.v \in Values \cup {NoValue}
            /\ DOMAIN op.d \subseteq Slots
            /\ \A s \in DOMAIN op.d : op.d[s] \in Entries

TypeOK ==
    /\ log \in [R -> [Slots -> Entries]]
    /\ minProp \in [R -> Ballots]
    /\ fuo \in [R -> 1..S+1]
    /\ writers \in [R -> SUBSET R]
    /\ reqs \in [R -> SUBSET R]
    /\ attempts \in 0..MaxAttempts
    /\ att \in [R -> 0..MaxAttempts]
    /\ phase \in [R -> Phases]
    /\ mem \in [R -> SUBSET R]
    /\ conf \in [R -> SUBSET R]
    /\ done \in [R -> SUBSET R]
    /\ bal \in [R -> Ballots]
    /\ prepared \in [R -> BOOLEAN]
    /\ deferred \in [R -> SUBSET R]
    /\ \A l, r \in R : \A i \in 1..Len(net[l][r]) : OpOK(net[l][r][i])
    /\ acc \subseteq (Slots \X Ballots \X Values \X R)
    /\ chosen \in [Slots -> SUBSET Values]
    /\ committed \in [Slots -> SUBSET Values]

Init0 ==
    /\ log = [r \in R |-> [s \in Slots |-> Empty]]
    /\ minProp = [r \in R |-> 0]
    /\ fuo = [r \in R |-> 1]
    /\ writers = [r \in R |-> {}]     \* no one may write a log before its manager grants it
    /\ reqs = [r \in R |-> {}]
    /\ attempts = 0
    /\ att = [l \in R |-> 0]
    /\ phase = [l \in R |-> "idle"]
    /\ mem = [l \in R |-> {}]
    /\ conf = [l \in R |-> {}]
    /\ done = [l \in R |-> {}]
    /\ bal = [l \in R |-> 0]
    /\ prepared = [l \in R |-> FALSE]
    /\ deferred = [l \in R |-> {}]
    /\ net = [l \in R |-> [r \in R |-> <<>>]]
    /\ acc = {}
    /\ chosen = [s \in Slots |-> {}]
    /\ committed = [s \in Slots |-> {}]

-----------------------------------------------------------------------------
(* Permission manager of replica r (section 5.2), as implemented: revoke,  *)
(* grant, acknowledge, in one step.  A manager serves every replica, member*)
(* or not: the implementation's managers ignore requests of replicas whose *)
(* removal they applied, and a removed replica stops; serving them as well *)
(* only adds behaviours.                                                   *)

\* Write access to r's log becomes {l}, and r's manager acknowledges to l.  The acknowledgement
\* counts if l is still collecting grants and asked r in its current round: r is a member of
\* the configuration l leads under, and not still deferred.
\*  - The writes in flight to r of the replica whose access was revoked fail (revocation is a
\*    barrier).
\*  - A leader r that loses its own log while it needs it for its next step can do nothing
\*    more in this attempt: it is set idle at once, which only merges states.
PmServe(r, l) ==
    LET W       == {l}
        changed == writers[r] \ W
        stop    == /\ r \in writers[r] /\ r \notin W
                   /\ phase[r] \in {"update", "pread", "pwrite", "accept"}
    IN
    /\ l \in reqs[r]
    /\ writers' = [writers EXCEPT ![r] = W]
    /\ net' = [x \in R |-> [t \in R |->
                  IF t = r /\ x \in changed THEN <<>> ELSE net[x][t]]]
    /\ reqs' = [reqs EXCEPT ![r] = @ \ {l}]
    /\ done' = [x \in R |-> IF x = l /\ phase[x] = "perm" /\ r \in mem[x] \ deferred[x]
                            THEN done[x] \cup {r}
                            ELSE IF x = r /\ stop THEN {}
                            ELSE done[x]]
    /\ phase' = IF stop THEN [phase EXCEPT ![r] = "idle"] ELSE phase
    /\ mem' = IF stop THEN [mem EXCEPT ![r] = {}] ELSE mem
    /\ conf' = IF stop THEN [conf EXCEPT ![r] = {}] ELSE conf
    /\ prepared' = IF stop THEN [prepared EXCEPT ![r] = FALSE] ELSE prepared
    /\ UNCHANGED <<replicaVars, attempts, att, bal, deferred, hist>>

-----------------------------------------------------------------------------
(* The network.                                                            *)

\* Replica r accepts (b, v) at slot s (history).
Record(s, b, v, r) ==
    LET acc2 == acc \cup {<<s, b, v, r>>}
        F    == ChosenInfo(acc2)
    IN
    /\ acc' = acc2
    /\ chosen' = [x \in Slots |-> F[x].vals]

\* The oldest write in flight from l to r lands: it takes effect if l may write r's log now,
\* and fails otherwise.  A success is an answer to l if it belongs to l's current step.
Land(l, r) ==
    /\ net[l][r] # <<>>
    /\ LET op  == Head(net[l][r])
           cur == op.a
       IN
       /\ net' = [net EXCEPT ![l][r] = Tail(@)]
       /\ IF l \notin writers[r]
            THEN UNCHANGED <<replicaVars, done, acc, chosen>>
          ELSE IF op.k = "upd" THEN              \* Listing 4: the slots, then the FUO
            /\ log' = [log EXCEPT ![r] = [s \in Slots |-> IF s \in DOMAIN op.d THEN op.d[s]
                                                           ELSE @[s]]]
            /\ fuo' = [fuo EXCEPT ![r] = op.f]
            /\ done' = IF cur /\ phase[l] = "update"
                       THEN [done EXCEPT ![l] = @ \cup {r}] ELSE done
            /\ UNCHANGED <<minProp, acc, chosen>>
          ELSE IF op.k = "fuo" THEN              \* Leader::publish_fuo: the FUO alone
            /\ fuo' = [fuo EXCEPT ![r] = op.f]
            /\ UNCHANGED <<log, minProp, done, acc, chosen>>
          ELSE IF op.k = "mp" THEN               \* Listing 2 line 22
            /\ minProp' = [minProp EXCEPT ![r] = op.b]
            /\ done' = IF cur /\ phase[l] = "pwrite" /\ op.b = bal[l]
                       THEN [done EXCEPT ![l] = @ \cup {r}] ELSE done
            /\ UNCHANGED <<log, fuo, acc, chosen>>
          ELSE                                   \* "acc": Listing 2 line 31
            /\ log' = [log EXCEPT ![r][op.s] = [b |-> op.b, v |-> op.v]]
            /\ Record(op.s, op.b, op.v, r)
            /\ done' = IF cur /\ phase[l] = "accept" /\ op.s = fuo[l] /\ op.b = bal[l]
                       THEN [done EXCEPT ![l] = @ \cup {r}] ELSE done
            /\ UNCHANGED <<minProp, fuo>>
    /\ UNCHANGED <<permVars, attempts, att, phase, mem, conf, bal, prepared, deferred,
                   committed>>

\* l may post to r now a write that can take effect (Mu.tla's Useful, and why leaving the
\* others out is sound).
Useful(l, r) == l \in writers[r] \/ ~SkipDoomedWrites

\* net after l posts op to every replica in T.
Posted(l, T, op) ==
    [net EXCEPT ![l] = [r \in R |-> IF r \in T /\ Useful(l, r) THEN Append(@[r], op) ELSE @[r]]]

\* A write: kind, whether it belongs to the current attempt of its writer, slot (first slot
\* for "upd"), FUO ("upd", "fuo"), proposal number, value, slots ("upd").
MkOp(k, s, f, b, v, d) == [k |-> k, a |-> TRUE, s |-> s, f |-> f, b |-> b, v |-> v, d |-> d]
NoData == [s \in {} |-> Empty]

\* l can read r's log now: its read lands behind l's writes in flight to r (FIFO).  Reading
\* its own log is local.
CanRead(l, r) == r = l \/ net[l][r] = <<>>

\* The sets of replicas a step of l may read: a majority of l's configuration, l included,
\* readable now.
ReadQuorums(l, from) ==
    {Q \in SUBSET from : l \in Q /\ IsMajority(Q, mem[l]) /\ \A r \in Q : CanRead(l, r)}

-----------------------------------------------------------------------------
(* Leader l.                                                               *)

\* l starts a new permission round (Leader::restart: refresh, then ask_permissions) with own
\* log lg and FUO f, net being nt so far: it works out the configuration lg gives at f and, if
\* that includes it, asks that configuration's members for write access, its own manager
\* included.  Its writes still in flight are no answer to the new round.  As in Mu.tla, it asks
\* at once only its own manager and those of the members it has no write in flight to, and the
\* others once those writes have landed or failed (AskAfterFence).  A configuration that leaves
\* l out sets l idle (Leader::step_down).  The attempt, and so the value l proposes, stays: the
\* implementation keeps its proposals queued and proposes them again.
NewRound(l, lg, f, nt) ==
    LET C     == ConfigOf(lg, f)
        stale == [nt EXCEPT ![l] = [r \in R |->
                      [i \in 1..Len(nt[l][r]) |-> [nt[l][r][i] EXCEPT !.a = FALSE]]]]
        later == {r \in C \ {l} : stale[l][r] # <<>>}
    IN
    /\ net' = stale
    /\ IF l \in C
         THEN /\ phase' = [phase EXCEPT ![l] = "perm"]
              /\ mem' = [mem EXCEPT ![l] = C]
              /\ reqs' = [r \in R |-> IF r \in C \ later THEN reqs[r] \cup {l} ELSE reqs[r]]
              /\ deferred' = [deferred EXCEPT ![l] = later]
         ELSE /\ UNCHANGED reqs
              /\ phase' = [phase EXCEPT ![l] = "idle"]
              /\ mem' = [mem EXCEPT ![l] = {}]
              /\ deferred' = [deferred EXCEPT ![l] = {}]
    /\ conf' = [conf EXCEPT ![l] = {}]
    /\ done' = [done EXCEPT ![l] = {}]
    /\ prepared' = [prepared EXCEPT ![l] = FALSE]

\* l decides it leads, or aborts and starts over (section 4.1), in a new attempt with a new
\* value, if the configuration its log gives includes it (Leader::become_leader returns false
\* otherwise: a removed replica stops).
Start(l) ==
    /\ attempts < MaxAttempts
    /\ l \in ConfigOf(log[l], fuo[l])
    /\ attempts' = attempts + 1
    /\ att' = [att EXCEPT ![l] = attempts + 1]
    /\ NewRound(l, log[l], fuo[l], net)
    /\ UNCHANGED <<replicaVars, writers, bal, hist>>

\* Everything l posted to r has landed or failed (a fence completed), so l asks r now
\* (Mu.tla's AskAfterFence).
AskAfterFence(l, r) ==
    /\ r \in deferred[l]
    /\ net[l][r] = <<>>
    /\ reqs' = [reqs EXCEPT ![r] = @ \cup {l}]
    /\ deferred' = [deferred EXCEPT ![l] = @ \ {r}]
    /\ UNCHANGED <<replicaVars, writers, attempts, att, phase, mem, conf, done, bal,
                   prepared, net, hist>>

\* Listing 2 lines 9-12: a majority of l's configuration granted, l itself among them: they are
\* the confirmed followers.  Then Listing 3: read their FUOs and copy the most advanced one's
\* slots below its FUO into l's own log (l must still hold it).  If the entries copied change
\* the configuration l's log gives, start over under the new one (Leader::end_catch_up_batch;
\* without "catchup" in StartOver, a mutation, go on under the old one); otherwise Listing 4:
\* post to every lagging follower the slots it lacks and l's new FUO.
Confirm(l) ==
    /\ phase[l] = "perm"
    /\ l \in done[l]
    /\ IsMajority(done[l], mem[l])
    /\ \A r \in done[l] : CanRead(l, r)
    /\ LET cf  == done[l]
           top == CHOOSE m \in {fuo[r] : r \in cf} : \A r \in cf : fuo[r] <= m
           src == IF fuo[l] = top THEN l ELSE CHOOSE r \in cf : fuo[r] = top
           newLog == [s \in Slots |-> IF fuo[l] <= s /\ s < top THEN log[src][s]
                                      ELSE log[l][s]]
           lagging == {r \in cf \ {l} : fuo[r] < top}
       IN
       /\ IF src = l
            THEN UNCHANGED <<log, fuo>>
            ELSE /\ l \in writers[l]
                 /\ log' = [log EXCEPT ![l] = newLog]
                 /\ fuo' = [fuo EXCEPT ![l] = top]
       /\ IF "catchup" \in StartOver /\ ConfigOf(newLog, top) # mem[l]
            THEN NewRound(l, newLog, top, net) /\ UNCHANGED <<attempts, att>>
            ELSE /\ net' = [net EXCEPT ![l] =
                      [r \in R |-> IF r \in lagging /\ Useful(l, r)
                                   THEN Append(@[r],
                                          MkOp("upd", fuo[r], top, 0, NoValue,
                                               [s \in fuo[r]..(top - 1) |-> newLog[s]]))
                                   ELSE @[r]]]
                 /\ conf' = [conf EXCEPT ![l] = cf]
                 /\ done' = [done EXCEPT ![l] = cf \ lagging]
                 /\ phase' = [phase EXCEPT ![l] = "update"]
                 /\ UNCHANGED <<attempts, att, reqs, mem, prepared, deferred>>
    /\ UNCHANGED <<minProp, writers, bal, hist>>

\* Listing 2 lines 19-22, once every follower is up to date, or after a commit: read the
\* minProposals of a majority, pick a proposal number above all of them and above every
\* one l used, write it into l's own minProposal and post it to the confirmed followers.
PrepareWrite(l) ==
    /\ \/ phase[l] = "pread"
       \/ phase[l] = "update" /\ done[l] = conf[l]
    /\ fuo[l] <= S
    /\ l \in writers[l]
    /\ \E Q \in ReadQuorums(l, conf[l]) :
          LET m == CHOOSE x \in {minProp[r] : r \in Q} : \A r \in Q : minProp[r] <= x
              b == NewBallot(Max(m, bal[l]), l)
          IN
          /\ bal' = [bal EXCEPT ![l] = b]
          /\ minProp' = [minProp EXCEPT ![l] = b]
          /\ net' = Posted(l, conf[l] \ {l}, MkOp("mp", fuo[l], fuo[l], b, NoValue, NoData))
    /\ phase' = [phase EXCEPT ![l] = "pwrite"]
    /\ done' = [done EXCEPT ![l] = {l}]
    /\ UNCHANGED <<log, fuo, permVars, attempts, att, mem, conf, prepared, deferred, hist>>

\* The values l may propose as its own at slot s: its attempt's ordinary value, or a membership
\* entry carrying a change of its configuration (Leader::check_change refuses any other).  Not
\* at the last slot, where the configuration a change makes would decide no slot of the model
\* (a reduction: such an entry is an ordinary one to every slot the model has), unless
\* EarlyConfig makes it decide its own slot.
OwnValues(l, s) ==
    {[a |-> att[l], c |-> ch] :
        ch \in {NoChange} \cup IF s < S \/ EarlyConfig
                                THEN {ch \in Changes : Apply(mem[l], ch) # mem[l]}
                                ELSE {}}

\* Listing 2 lines 29-31: write (l's proposal number, v) into slot s of l's own log and post it
\* to the confirmed followers; f is l's FUO after the step, and prep whether it omits prepare
\* from now on.  With EarlyConfig, an entry that changes the configuration l's log gives is
\* taken into use at once: l starts over under it.
Accept(l, s, v, f, prep) ==
    LET lg == [log[l] EXCEPT ![s] = [b |-> bal[l], v |-> v]]
        nt == Posted(l, conf[l] \ {l}, MkOp("acc", s, s, bal[l], v, NoData))
    IN
    /\ log' = [log EXCEPT ![l] = lg]
    /\ Record(s, bal[l], v, l)
    /\ IF EarlyConfig /\ ConfigOf(lg, f) # mem[l]
         THEN NewRound(l, lg, f, nt) /\ UNCHANGED <<attempts, att>>
         ELSE /\ net' = nt
              /\ phase' = [phase EXCEPT ![l] = "accept"]
              /\ done' = [done EXCEPT ![l] = {l}]
              /\ prepared' = [prepared EXCEPT ![l] = prep]
              /\ UNCHANGED <<attempts, att, reqs, mem, conf, deferred>>

\* Listing 2 lines 23-28: read the slot at l's FUO in a majority whose minProposal write
\* landed (each read behind that write on its connection) and adopt the highest-numbered
\* value, or l's own if all are empty; then omit prepare from now on (section 4.2).  Accept.
EndPrepare(l) ==
    /\ phase[l] = "pwrite"
    /\ l \in writers[l]
    /\ \E Q \in ReadQuorums(l, done[l]) :
          LET es  == {log[r][fuo[l]] : r \in Q}
              top == CHOOSE e \in es : \A x \in es : x.b <= e.b
          IN
          \E v \in IF top.b = 0 THEN OwnValues(l, fuo[l]) ELSE {top.v} :
             Accept(l, fuo[l], v, fuo[l], top.b = 0)
    /\ UNCHANGED <<minProp, fuo, writers, bal, committed>>

\* Listing 2 lines 32-36: a majority of l's configuration (l included) holds the entry: commit
\* it by advancing l's FUO.  If that changes the configuration l's log gives (a membership
\* entry), write the new FUO to the confirmed followers and start over under the new
\* configuration (Leader::try_commit: publish_fuo, restart); without "commit" in StartOver (a
\* mutation), go on under the configuration and confirmed followers l has.  Otherwise, with
\* prepare omitted, accept l's next value at once; or prepare next.
Commit(l) ==
    /\ phase[l] = "accept"
    /\ IsMajority(done[l], mem[l])
    /\ l \in writers[l]
    /\ LET s == fuo[l] IN
       /\ fuo' = [fuo EXCEPT ![l] = s + 1]
       /\ committed' = [committed EXCEPT ![s] = @ \cup {log[l][s].v}]
       /\ IF "commit" \in StartOver /\ ConfigOf(log[l], s + 1) # mem[l]
            THEN /\ NewRound(l, log[l], s + 1,
                             Posted(l, conf[l] \ {l}, MkOp("fuo", s, s + 1, 0, NoValue, NoData)))
                 /\ UNCHANGED <<log, acc, chosen, attempts, att>>
          ELSE IF s < S /\ prepared[l]
            THEN \E v \in OwnValues(l, s + 1) : Accept(l, s + 1, v, s + 1, TRUE)
          ELSE /\ phase' = [phase EXCEPT ![l] = IF s < S THEN "pread" ELSE "end"]
               /\ done' = [done EXCEPT ![l] = {}]
               /\ UNCHANGED <<log, net, acc, chosen, attempts, att, reqs, mem, conf, prepared,
                              deferred>>
    /\ UNCHANGED <<minProp, writers, bal>>

-----------------------------------------------------------------------------

Next ==
    \/ \E l \in Leaders :
          \/ Start(l)
          \/ \E r \in R : AskAfterFence(l, r)
          \/ Confirm(l)
          \/ PrepareWrite(l)
          \/ EndPrepare(l)
          \/ Commit(l)
          \/ \E r \in R : Land(l, r)
    \/ \E r \in R : \E l \in R : PmServe(r, l)

Spec == Init0 /\ [][Next]_vars

-----------------------------------------------------------------------------
(* Properties.                                                             *)

\* Agreement: at most one value is ever chosen at a slot: accepted with one proposal number
\* by a majority of the slot's configuration, which the values chosen below it define.
Agreement == \A s \in Slots : Cardinality(chosen[s]) <= 1

\* ... and every replica's log holds it below the replica's FUO: a leader's log when it
\* commits (it advances its FUO) and a follower's when it is brought up to date or told the FUO.
DecidedAgreement == \A r \in R : \A s \in Slots :
                        s < fuo[r] => log[r][s].v \in chosen[s]

\* Leaders never commit two values at one slot (the history of commits, whatever the
\* configurations: this one does not depend on what chosen means).
CommitAgreement == \A s \in Slots : Cardinality(committed[s]) <= 1

\* A leader past its permission round that still holds its own log works under the
\* configuration that log gives at its FUO, is a member of it, and its confirmed followers are
\* members.  (A leader that lost its own log in its permission round may still confirm, as in
\* Mu.tla, but can take no step after that: each needs its own log.  Meanwhile another leader
\* may write that log.)
LeaderConfig == \A l \in R :
                    phase[l] \in {"update", "pread", "pwrite", "accept"} /\ l \in writers[l] =>
                    /\ mem[l] = ConfigOf(log[l], fuo[l])
                    /\ l \in mem[l]
                    /\ conf[l] \subseteq mem[l]

\* Commit piggybacking (section 4.2) is sound: a follower that finds slot s + 1 filled may
\* apply slot s, which then holds the chosen value.
PiggybackSafe == \A r \in R : \A s \in 1..(S - 1) :
                     log[r][s + 1].b # 0 => log[r][s].v \in chosen[s]

\* Single writer (section 5.2): at most one replica may write a log at any time.
SingleWriter == \A r \in R : Cardinality(writers[r]) <= 1

\* A leader's request is pending at another replica only while none of its writes to that
\* replica is in flight (what the fence is for, and what makes SkipDoomedWrites sound).
FencedAsks == \A l \in R : \A r \in R \ {l} : l \in reqs[r] => net[l][r] = <<>>

=============================================================================
