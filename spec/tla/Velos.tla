-------------------------------- MODULE Velos --------------------------------
(***************************************************************************)
(* Velos's slot protocol (Velos paper, Algorithm 5 and section 5.2; Mu's   *)
(* design in docs/protocols/velos.md): one instance of consensus, that is  *)
(* one log index, decided by remote compare-and-swaps (CAS) on passive     *)
(* acceptors, the value being held apart from the CAS word (indirection).  *)
(*                                                                         *)
(* Acceptors are the set A, one per replica (N of them).  Acceptor a holds *)
(* a CAS word (min proposal, accepted proposal) and, per proposer q, q's   *)
(* value-log entry for the index: (tag, value), the tag being the proposal *)
(* q wrote it under.  Only q writes q's entries, and each of q's accepts   *)
(* overwrites them.  The lap and the "previous decided" bit of the word    *)
(* are left out (one index).  Proposal b is round * N + position + 1; a    *)
(* proposer's id here is its position + 1, so b belongs to Owner(b) =      *)
(* (b-1) mod N + 1.                                                        *)
(*                                                                         *)
(* A proposer may start an attempt at any moment (leader election is left  *)
(* out, and starting over is also how it gives up), so safety cannot       *)
(* depend on who leads.  It keeps a PREDICTED word per acceptor, and       *)
(*  - prepare: raises its proposal b above every predicted min proposal    *)
(*    (Algorithm 5 lines 15-17) and posts CAS(predicted, (b, predicted     *)
(*    accepted proposal)) to every acceptor;                               *)
(*  - once a majority answered: any failure aborts; otherwise, if some     *)
(*    answer holds an accepted proposal, it takes the highest, hb, reads   *)
(*    the entry of hb's proposer at an acceptor that reported hb, and      *)
(*    adopts its value if the entry exists and its tag is >= hb (otherwise *)
(*    it aborts); if none does, it proposes its attempt's own value (the   *)
(*    values of different attempts differ);                                *)
(*  - accept, at once or later (pre-preparation): posts to every acceptor  *)
(*    the write of its entry (tag b, the value), then CAS(predicted, (b,   *)
(*    b)) on the same connection, but, with AcceptCheck, no CAS where the  *)
(*    predicted min proposal is above b (Algorithm 4 line 47; such an      *)
(*    acceptor counts as a failed answer);                                 *)
(*  - once a majority answered: any failure aborts; otherwise it decided.  *)
(*                                                                         *)
(* Every CAS updates the prediction: to the desired word when it is posted *)
(* (the optimistic rule, lines 28-29 and 48-49), to the returned word when *)
(* it fails.  Algorithm 5 ignores results that come after the majority     *)
(* point; the design does not (LateResults): a late failure of the latest  *)
(* CAS to an acceptor still updates the prediction, which matters while    *)
(* the proposer is prepared and has not posted its accept (a late result   *)
(* then can predict a higher promise than the proposal, which only the     *)
(* accept check keeps the accept CAS from lowering).  A new attempt        *)
(* predicts, as Predictions allows: "own", Algorithm 5's predictions, the  *)
(* proposal never going down; "local", every word to be one acceptor's     *)
(* word, as a new leader predicts its own local word (section 5.1; any     *)
(* acceptor's here, which keeps the acceptors interchangeable), the        *)
(* proposal then computed from that prediction alone; "fetch", the words   *)
(* as they are (Algorithm 4's fetch_state, or a lucky guess), once its     *)
(* operations have all landed. Predictions, stale or wrong, can only make  *)
(* prepare CASes fail.                                                     *)
(*                                                                         *)
(* Operations are in flight per (proposer, acceptor) connection and land   *)
(* later, in the order posted (RC is FIFO); a read lands behind them.      *)
(* Operations of an abandoned attempt still land.  A proposer that crashes *)
(* is one that takes no more steps: its operations in flight land or never *)
(* do, and both are behaviours of the model, since an operation that is    *)
(* lost is one that has not landed yet, for ever.                          *)
(*                                                                         *)
(* Properties (at the end): promises are kept (PromiseKept); Agreement and *)
(* Validity in Paxos' sense (chosen: accepted under one proposal by a      *)
(* majority); and the indirection: a proposal has one value                *)
(* (OneValuePerProposal); an acceptor that accepted b holds an entry of    *)
(* b's proposer tagged >= b (AcceptedHasEntry, what FIFO buys), so the     *)
(* adopting read always passes the tag check (TagCheckPasses); every       *)
(* proposal, hence every entry, tagged at or above a chosen proposal holds *)
(* the chosen value (SafeAboveChosen, why "tag >= hb" is the right test);  *)
(* and a prepare over any majority, answered now, would adopt the chosen   *)
(* value (ChosenReadable).                                                 *)
(*                                                                         *)
(* Mutations: AdoptOwn = TRUE reads the adopting proposer's own entry      *)
(* instead of that of hb's proposer; TagCheck = FALSE adopts an entry      *)
(* whatever its tag (it must still exist: the mu-log checksum); Fifo =     *)
(* FALSE lets an accept CAS land before the write of its entry;            *)
(* AcceptCheck = FALSE posts the accept CAS from any predicted word.       *)
(***************************************************************************)
EXTENDS Naturals, FiniteSets, Sequences, TLC

CONSTANTS
    A,             \* the acceptors: one per replica (model values, symmetric)
    Proposers,     \* the proposers' ids, in 1..N: their positions + 1
    Rounds,        \* proposal rounds: proposer p's proposals are r * N + p for r in 0..Rounds-1
    MaxAttempts,   \* attempts in all (prepares started), over every proposer
    Predictions,   \* how an attempt may predict the words: "own", "local", "fetch" (see Start)
    LateResults,   \* TRUE: a result after the majority point still updates the prediction
    AcceptCheck,   \* TRUE: accept only where the predicted min proposal is at most the proposal
    TagCheck,      \* TRUE: adopt an entry only if its tag is >= the accepted proposal
    AdoptOwn,      \* TRUE (mutation): read the adopting proposer's own entry
    Fifo           \* TRUE: operations on one connection land in the order posted

N          == Cardinality(A)                \* replicas
ASSUME N > 0 /\ Proposers \subseteq 1..N
ASSUME Rounds \in Nat \ {0} /\ MaxAttempts \in Nat
ASSUME Predictions \subseteq {"own", "local", "fetch"} /\ Predictions # {}
ASSUME {LateResults, AcceptCheck, TagCheck, AdoptOwn, Fifo} \subseteq BOOLEAN

IsMajority(Q) == 2 * Cardinality(Q) > N
Majorities == {Q \in SUBSET A : IsMajority(Q)}
\* An attempt's own value is its number: values of different attempts differ.  0: no value.
Inputs     == 1..MaxAttempts
Own(p)     == {r * N + p : r \in 0..(Rounds - 1)}
Ballots    == {0} \cup UNION {Own(p) : p \in Proposers}
Owner(b)   == ((b - 1) % N) + 1
Max(S)     == CHOOSE x \in S : \A y \in S : y <= x
Min(S)     == CHOOSE x \in S : \A y \in S : x <= y

Words      == [min : Ballots, acc : Ballots]
Entries    == [tag : Ballots, val : Inputs \cup {0}]
Zero       == [min |-> 0, acc |-> 0]
NoEntry    == [tag |-> 0, val |-> 0]

\* An operation in flight: "w" writes the poster's entry (tag t, value v); "p" and "a" are the
\* prepare and accept CASes of proposal t, expected word e, desired word d, and c says whether
\* the poster still waits for its result (its phase is not over).  v of an accept is the value
\* its attempt wrote (history, for the properties only).
Ops == [k : {"w", "p", "a"}, t : Ballots, e : Words, d : Words, v : Inputs \cup {0},
        c : BOOLEAN]
Phases == {"idle",   \* not proposing (never started, or aborted)
           "prep",   \* prepare CASes posted, waiting for a majority
           "read",   \* prepared: reading the entry to adopt
           "ready",  \* prepared, value known, accept not posted yet (pre-preparation)
           "acc",    \* entries and accept CASes posted, waiting for a majority
           "done"}   \* decided

VARIABLES
    \* ---- acceptors ----
    word,      \* word[a]: a's CAS word
    entry,     \* entry[a][q]: q's value-log entry for the index in a's memory
    \* ---- proposers ----
    attempts,  \* attempts started so far
    phase,     \* phase[p]
    bal,       \* bal[p]: p's proposal (0: none yet)
    val,       \* val[p]: the value p proposes (its attempt's own, or the one it adopted)
    pred,      \* pred[p][a]: the word p predicts at a
    ans,       \* ans[p][a]: the result of p's CAS to a in the current phase
    \* ---- the network ----
    net,       \* net[p][a]: p's operations to a in flight, oldest first
    \* ---- history, for the properties only ----
    accepted,  \* every accept that took effect: <<acceptor, proposal, value>>
    promised   \* promised[a]: the highest min proposal a's word ever held

acceptorVars == <<word, entry>>
proposerVars == <<attempts, phase, bal, val, pred, ans>>
vars == <<acceptorVars, proposerVars, net, accepted, promised>>

TypeOK ==
    /\ word \in [A -> Words]
    /\ \A a \in A : word[a].acc <= word[a].min
    /\ entry \in [A -> [Proposers -> Entries]]
    /\ attempts \in 0..MaxAttempts
    /\ phase \in [Proposers -> Phases]
    /\ bal \in [Proposers -> Ballots]
    /\ val \in [Proposers -> Inputs \cup {0}]
    /\ pred \in [Proposers -> [A -> Words]]
    /\ ans \in [Proposers -> [A -> {"none", "ok", "fail"}]]
    /\ \A p \in Proposers : \A a \in A : \A i \in 1..Len(net[p][a]) : net[p][a][i] \in Ops
    /\ accepted \subseteq A \X Ballots \X Inputs
    /\ promised \in [A -> Ballots]

Init ==
    /\ word = [a \in A |-> Zero]
    /\ entry = [a \in A |-> [q \in Proposers |-> NoEntry]]
    /\ attempts = 0
    /\ phase = [p \in Proposers |-> "idle"]
    /\ bal = [p \in Proposers |-> 0]
    /\ val = [p \in Proposers |-> 0]
    /\ pred = [p \in Proposers |-> [a \in A |-> Zero]]   \* Algorithm 5 line 3
    /\ ans = [p \in Proposers |-> [a \in A |-> "none"]]
    /\ net = [p \in Proposers |-> [a \in A |-> <<>>]]
    /\ accepted = {}
    /\ promised = [a \in A |-> 0]

-----------------------------------------------------------------------------
(* Helpers.                                                                 *)

NoAnswers == [a \in A |-> "none"]

\* Chosen, Paxos' sense: accepted under one proposal by a majority.  ChosenAt holds the
\* (proposal, value) pairs, Chosen the values.
ChosenAt == {<<x[2], x[3]>> : x \in {y \in accepted :
                IsMajority({a \in A : <<a, y[2], y[3]>> \in accepted})}}
Chosen   == {bv[2] : bv \in ChosenAt}

\* Whether the i-th operation of connection s is the latest CAS posted on it.
Latest(s, i) == \A j \in (i + 1)..Len(s) : s[j].k = "w"

\* A CAS nobody waits for any more whose expected word the acceptor's word w has passed (in min
\* or accepted proposal, which never decrease) can only land and fail.  Unless its failure
\* still updates the prediction (see Land: with LateResults, the latest CAS while its proposer
\* is prepared, late), it has no effect, whenever it lands.  It is dropped at once, which only
\* merges states: the operations behind it on its connection still land after those ahead of
\* it.  late: whether the proposer of s is prepared (a late result counts).
Doomed(s, i, w, late) == /\ s[i].k # "w"
                         /\ ~s[i].c
                         /\ w.min > s[i].e.min \/ w.acc > s[i].e.acc
                         /\ LateResults /\ late => ~Latest(s, i)
Prune(s, w, late) ==
    LET keep   == {i \in 1..Len(s) : ~Doomed(s, i, w, late)}
        kth(k) == CHOOSE i \in keep : Cardinality({j \in keep : j <= i}) = k
    IN [k \in 1..Cardinality(keep) |-> s[kth(k)]]

\* p's operations in flight, none of them awaited any more (p's phase is over; late: p is
\* prepared now).
Stale(p, late) ==
    [a \in A |-> Prune([i \in 1..Len(net[p][a]) |-> [net[p][a][i] EXCEPT !.c = FALSE]],
                       word[a], late)]

Answered(p) == {a \in A : ans[p][a] # "none"}

\* p gives up its attempt (Algorithm 5 lines 34, 52): it waits for nothing any more.  What
\* it posted still lands.  A new attempt may follow (Start).
AbortVars(p) ==
    /\ phase' = [phase EXCEPT ![p] = "idle"]
    /\ ans' = [ans EXCEPT ![p] = NoAnswers]
    /\ net' = [net EXCEPT ![p] = Stale(p, FALSE)]

\* p accepts its value under its proposal (lines 40-44, section 5.2): to every acceptor, the
\* write of its entry, then the CAS from the predicted word to (b, b), on one connection.  The
\* prediction becomes the desired word at once (optimistic, line 49).  With AcceptCheck, an
\* acceptor whose predicted min proposal is above b gets the write but no CAS, and counts as a
\* failed answer (Algorithm 4 line 47, kept by the design: a late failed prepare answer can
\* predict a higher promise, and a CAS from it to (b, b) would lower that promise).
PostAccept(p, v) ==
    LET b   == bal[p]
        new == [min |-> b, acc |-> b]
        wr  == [k |-> "w", t |-> b, e |-> Zero, d |-> Zero, v |-> v, c |-> FALSE]
        ok(a)  == ~AcceptCheck \/ pred[p][a].min <= b
        cas(a) == [k |-> "a", t |-> b, e |-> pred[p][a], d |-> new, v |-> v, c |-> TRUE]
    IN
    /\ net' = [net EXCEPT ![p] = [a \in A |-> Stale(p, FALSE)[a] \o
                                      (IF ok(a) THEN <<wr, cas(a)>> ELSE <<wr>>)]]
    /\ pred' = [pred EXCEPT ![p] = [a \in A |-> IF ok(a) THEN new ELSE pred[p][a]]]
    /\ ans' = [ans EXCEPT ![p] = [a \in A |-> IF ok(a) THEN "none" ELSE "fail"]]
    /\ phase' = [phase EXCEPT ![p] = "acc"]
    /\ val' = [val EXCEPT ![p] = v]

\* p is prepared, with value v to accept.  It may accept at once or later (Accept): a leader
\* prepares indices ahead of the one it accepts (section 5.1).  Waiting makes a difference only
\* if a late result can still change p's prediction (LateResults, a CAS of p's in flight);
\* otherwise p accepts at once, which only leaves out states in which nothing differs but that
\* p's operations are posted later.
Prepared(p, v) ==
    IF LateResults /\ \E a \in A : \E i \in 1..Len(net[p][a]) : net[p][a][i].k # "w"
      THEN /\ phase' = [phase EXCEPT ![p] = "ready"]
           /\ val' = [val EXCEPT ![p] = v]
           /\ net' = [net EXCEPT ![p] = Stale(p, TRUE)]
           /\ UNCHANGED <<pred, ans>>
    ELSE PostAccept(p, v)

-----------------------------------------------------------------------------
(* Proposer p.                                                              *)

\* Prepare (Algorithm 5 lines 14-24), as a first attempt, a retry after an abort, or at any
\* moment (a leader that gives up waiting, or a new leader), with a new value.  The prediction
\* is p's own ("own"), one acceptor's word everywhere ("local"), or the words as they are
\* ("fetch"); the proposal is p's smallest one above every predicted min proposal, and with
\* "own" not below its last one.  Then a CAS to every acceptor moves the min proposal to b and
\* keeps what was accepted.
Start(p) ==
    /\ attempts < MaxAttempts
    /\ \E how \in Predictions :
         \E loc \in IF how = "local" THEN A ELSE {CHOOSE a \in A : TRUE} :
         LET pr    == CASE how = "own"   -> pred[p]
                      []   how = "local" -> [a \in A |-> word[loc]]
                      []   how = "fetch" -> word
             floor == IF how = "own" THEN bal[p] ELSE 0
             cands == {b \in Own(p) : b >= floor /\ \A a \in A : b > pr[a].min}
         IN
         \* a fetch lands behind p's operations in flight: take it once they have all landed
         /\ how = "fetch" => \A a \in A : net[p][a] = <<>>
         /\ cands # {}        \* otherwise p's proposals are exhausted: it stops
         /\ LET b      == Min(cands)
                new(a) == [min |-> b, acc |-> pr[a].acc]
                cas(a) == [k |-> "p", t |-> b, e |-> pr[a], d |-> new(a), v |-> 0, c |-> TRUE]
            IN
            /\ bal' = [bal EXCEPT ![p] = b]
            /\ net' = [net EXCEPT ![p] = [a \in A |-> Append(Stale(p, FALSE)[a], cas(a))]]
            /\ pred' = [pred EXCEPT ![p] = [a \in A |-> new(a)]]
    /\ attempts' = attempts + 1
    /\ val' = [val EXCEPT ![p] = attempts + 1]
    /\ phase' = [phase EXCEPT ![p] = "prep"]
    /\ ans' = [ans EXCEPT ![p] = NoAnswers]
    /\ UNCHANGED <<acceptorVars, accepted, promised>>

\* A majority answered p's prepare (lines 25-38).  A failure aborts.  Otherwise p is prepared:
\* with nothing accepted in the answers, ready to accept its own value; or it goes and reads
\* the entry to adopt.  Answers that come later are no answers (but see LateResults).
EndPrepare(p) ==
    /\ phase[p] = "prep"
    /\ IsMajority(Answered(p))
    /\ IF \E a \in A : ans[p][a] = "fail"
         THEN /\ AbortVars(p)
              /\ UNCHANGED <<val, pred>>
       ELSE IF \A a \in Answered(p) : pred[p][a].acc = 0
         THEN Prepared(p, val[p])
       ELSE /\ phase' = [phase EXCEPT ![p] = "read"]
            /\ net' = [net EXCEPT ![p] = Stale(p, TRUE)]
            /\ UNCHANGED <<ans, val, pred>>
    /\ UNCHANGED <<acceptorVars, attempts, bal, accepted, promised>>

\* Adoption with indirection (section 5.2, docs/protocols/velos.md "Adopting a value"): hb is
\* the highest accepted proposal among the answers (a successful CAS returned the predicted
\* word, whose accepted proposal the prediction still holds).  p reads, at an acceptor a that
\* reported hb, the entry of hb's proposer (AdoptOwn: p's own entry), behind p's operations to a
\* (FIFO; the read is taken when it lands).  An entry that exists and, with TagCheck, has a tag
\* >= hb is adopted; otherwise p aborts.
ReadAdopt(p, a) ==
    /\ phase[p] = "read"
    /\ LET hb == Max({pred[p][x].acc : x \in Answered(p)})
           e  == entry[a][IF AdoptOwn THEN p ELSE Owner(hb)]
       IN
       /\ ans[p][a] = "ok"
       /\ pred[p][a].acc = hb
       /\ net[p][a] = <<>>
       /\ IF e.tag # 0 /\ (TagCheck => e.tag >= hb)
            THEN Prepared(p, e.val)
          ELSE /\ AbortVars(p)
               /\ UNCHANGED <<val, pred>>
    /\ UNCHANGED <<acceptorVars, attempts, bal, accepted, promised>>

\* Accept (lines 40-44), later than the prepare (see Prepared).
Accept(p) ==
    /\ phase[p] = "ready"
    /\ PostAccept(p, val[p])
    /\ UNCHANGED <<acceptorVars, attempts, bal, accepted, promised>>

\* A majority answered p's accept (lines 44-56): a failure aborts; otherwise p decided.
EndAccept(p) ==
    /\ phase[p] = "acc"
    /\ IsMajority(Answered(p))
    /\ IF \E a \in A : ans[p][a] = "fail"
         THEN AbortVars(p)
       ELSE /\ phase' = [phase EXCEPT ![p] = "done"]
            /\ ans' = [ans EXCEPT ![p] = NoAnswers]
            /\ net' = [net EXCEPT ![p] = Stale(p, FALSE)]
    /\ UNCHANGED <<acceptorVars, attempts, bal, val, pred, accepted, promised>>

-----------------------------------------------------------------------------
(* The network.                                                             *)

\* Which of p's operations to a may land next: the oldest; without Fifo, also an accept CAS
\* right behind the write of its entry (it overtakes the write).
Landable(p, a) ==
    LET q == net[p][a] IN
    {i \in 1..Min({2, Len(q)}) : i = 2 => ~Fifo /\ q[1].k = "w" /\ q[2].k = "a"}

\* p's i-th operation in flight to a lands.  A write stores p's entry.  A CAS compares and
\* swaps a's word; its result, if p still waits for it, is p's answer, and a failure puts the
\* word it returned into p's prediction (lines 30-31, 50-51).  With LateResults (the design:
\* "its result updates the prediction"), so does a result that comes after the majority point,
\* if it is of the latest CAS p posted to a, while p is prepared and has not posted its accept:
\* the prediction the accept will expect.  (Any other time, the next CAS to a is a prepare, whose
\* prediction only decides whether it succeeds; Start's predictions stand for that.)
Land(p, a, i) ==
    LET op == net[p][a][i]
        ok == word[a] = op.e
        rest == [net EXCEPT ![p][a] = SubSeq(@, 1, i - 1) \o SubSeq(@, i + 1, Len(@))]
    IN
    /\ IF op.k = "w"
         THEN /\ entry' = [entry EXCEPT ![a][p] = [tag |-> op.t, val |-> op.v]]
              /\ net' = rest
              /\ UNCHANGED <<word, pred, ans, accepted, promised>>
       ELSE /\ word' = IF ok THEN [word EXCEPT ![a] = op.d] ELSE word
            /\ net' = IF ok
                      THEN [q \in Proposers |->
                              [rest[q] EXCEPT ![a] =
                                  Prune(@, word'[a], phase[q] \in {"read", "ready"})]]
                      ELSE rest
            /\ accepted' = IF ok /\ op.k = "a" THEN accepted \cup {<<a, op.t, op.v>>}
                           ELSE accepted
            /\ promised' = [promised EXCEPT ![a] = IF word'[a].min > @ THEN word'[a].min ELSE @]
            /\ ans' = IF op.c THEN [ans EXCEPT ![p][a] = IF ok THEN "ok" ELSE "fail"]
                      ELSE ans
            /\ pred' = IF ~ok /\ (op.c \/ (LateResults /\ Latest(net[p][a], i)
                                              /\ phase[p] \in {"read", "ready"}))
                       THEN [pred EXCEPT ![p][a] = word[a]] ELSE pred
            /\ UNCHANGED entry
    /\ UNCHANGED <<attempts, phase, bal, val>>

\* The next of p's operations to a lands.
Deliver(p, a) == \E i \in Landable(p, a) : Land(p, a, i)

-----------------------------------------------------------------------------

Next ==
    \E p \in Proposers :
        \/ Start(p)
        \/ EndPrepare(p)
        \/ \E a \in A : ReadAdopt(p, a)
        \/ Accept(p)
        \/ EndAccept(p)
        \/ \E a \in A : Deliver(p, a)

Spec == Init /\ [][Next]_vars

\* Acceptors are interchangeable: checking one state of each class of permutations is enough.
Sym == Permutations(A)

-----------------------------------------------------------------------------
(* Properties.                                                              *)

\* A promise is kept: no acceptor's min proposal ever goes down.  (An accept CAS from a word
\* with a higher promise than its proposal would lower it: AcceptCheck.)
PromiseKept == \A a \in A : word[a].min = promised[a]

\* Agreement: at most one value is chosen, and a proposer that decided, decided it.
Agreement == /\ Cardinality(Chosen) <= 1
             /\ \A p \in Proposers : phase[p] = "done" => val[p] \in Chosen

\* The (proposal, value) pairs of every accept phase that has left a trace: an entry, an
\* acceptance, or a proposer accepting or done.  (Writes and CASes still in flight count once
\* they land.)
Proposals ==
    {<<e.tag, e.val>> : e \in {entry[a][q] : a \in A, q \in Proposers} \ {NoEntry}}
    \cup {<<x[2], x[3]>> : x \in accepted}
    \cup {<<bal[p], val[p]>> : p \in {x \in Proposers : phase[x] \in {"acc", "done"}}}

\* Validity: every value proposed, hence every value chosen, is the own value of some attempt
\* (not a value read from a missing entry).
Validity == \A x \in Proposals : x[2] \in Inputs

\* A proposal has one value: p writes entries tagged b only in the accept phase of an attempt
\* whose prepare of b succeeded, and two prepares of b cannot both succeed at a majority (a
\* successful prepare CAS raises the min proposal strictly).  So "the entry tagged b" names
\* one value, even though p overwrites its entry with every accept.
OneValuePerProposal == \A x, y \in Proposals : x[1] = y[1] => x[2] = y[2]

\* What FIFO buys (section 5.2): an acceptor whose word says it accepted b holds an entry of
\* b's proposer tagged b or later (the write was posted before the CAS on the connection, and
\* that proposer's tags only grow at a).  So the adopting read, made at an acceptor that
\* reported b, always finds an entry that passes the tag check (TagCheckPasses).
AcceptedHasEntry ==
    \A a \in A : word[a].acc # 0 => entry[a][Owner(word[a].acc)].tag >= word[a].acc

\* The tag check never fails: while p reads, the entry of hb's proposer at every acceptor that
\* reported hb is tagged hb or later.  (With Fifo the check is redundant; it is the mu-log
\* checksum and the index in the entry that reject torn and recycled entries.)
TagCheckPasses ==
    \A p \in Proposers : phase[p] = "read" =>
        LET hb == Max({pred[p][x].acc : x \in Answered(p)}) IN
        \A a \in Answered(p) : pred[p][a].acc = hb => entry[a][Owner(hb)].tag >= hb

\* The invariant that makes "tag >= hb" the right test: once b is chosen with value v, every
\* proposal at or above b proposes v, so every entry tagged b or later holds v, whichever
\* proposer wrote it, at whichever acceptor, however often it was overwritten.
SafeAboveChosen ==
    \A bv \in ChosenAt :
        \A x \in Proposals : x[1] >= bv[1] => x[2] = bv[2]

\* A chosen value is readable: a prepare over any majority Q, answered now, would find a highest
\* accepted proposal hb (>= the chosen one: the majorities intersect), and at every member of Q
\* that reported hb, the entry of hb's proposer passes the tag check and holds the chosen value.
ChosenReadable ==
    \A bv \in ChosenAt : \A Q \in Majorities :
        LET hb == Max({word[a].acc : a \in Q}) IN
        /\ hb >= bv[1]
        /\ \A a \in Q : word[a].acc = hb =>
               /\ entry[a][Owner(hb)].tag >= hb
               /\ entry[a][Owner(hb)].val = bv[2]

=============================================================================
