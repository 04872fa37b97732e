package cassandra

import "strings"

// stmts are the CQL statements of one keyspace, built once at Open.
type stmts struct {
	metaInsert string

	edgeSelect   string
	edgeInsert   string // a new edge with its pending event: IF NOT EXISTS
	edgeUpdate   string // a new version with its pending event: IF eseq = ?
	edgeRecord   string // a record event on an unchanged edge: IF eseq = ?
	relaySelect  string
	relayPut     string // USING TIMESTAMP eseq
	likersFirst  string
	likersAfter  string
	idemSelect   string
	idemInsert   string
	idemPurge    string
	userItemsAdd string
	userItems    string

	userItemsPurge   string
	erasureInsert    string
	erasureSelect    string
	erasureAll       string
	erasureExists    string
	erasureAnnGet    string // announced (schema 8)
	erasureInsertNew string // the row of a job starting here, announced = false
	erasureAnnPut    string

	intentInsert string
	intentDelete string
	intentScan   string
	cursorGet    string
	cursorPut    string
	metaSelect   string

	outboxInsert string
	outboxRange  string

	cellsOfItem   string
	cellSelect    string
	dedupeUpdate  string // USING TIMESTAMP ownCellStamp
	dedupeSelect  string
	baseSelect    string // + "((kind, ?, ?, ?), …)": Base's cells and dedupe rows of one item
	cellCount     string
	itemsFirst    string
	itemsAfter    string
	positionGet   string
	positionPut   string
	positionAll   string
	watermarksAll string

	remoteCursors   string
	remoteCursorPut string // USING TIMESTAMP pos
	watermarkPut    string // USING TIMESTAMP watermark
	cellPut         string // USING TIMESTAMP hwm (a peer's cell) or ownCellStamp (this region's)
	cellsOfRegion   string
	userItemsAll    string
	userItemDelete  string

	floorGet       string
	floorPut       string // USING TIMESTAMP through
	floorDeleted   string // USING TIMESTAMP deleted
	outboxDropPart string // one chunk partition
	outboxDropTo   string // a chunk's rows at or below a position
	dedupeScan     string
	dedupeDrop     string // USING TIMESTAMP the row's write time
	dedupeStamp    string // USING TIMESTAMP the row's write time
	edgesAll       string
	idemAll        string

	cellGet       string
	rebuildsAll   string
	rebuildPut    string
	rebuildDrop   string
	identityGet   string
	identityPut   string // IF data_set = the data set read before (null: none)
	anyEdge       string
	anyPeerCursor string
}

func newStmts(ks string) stmts {
	r := strings.NewReplacer("KS.", ks+".")
	q := func(s string) string { return r.Replace(s) }
	const edgeCols = `state, epoch, op, updated_at, eseq, pending, branches, last_nonce, relayed_eseq, relayed_pos, relayed_time`
	return stmts{
		metaInsert: q(`INSERT INTO KS.meta (name, region, partitions, created_ms, seq_groups) VALUES (?, ?, ?, ?, ?) IF NOT EXISTS`),

		edgeSelect: q(`SELECT ` + edgeCols + ` FROM KS.edges WHERE item = ? AND bucket = ? AND user = ?`),
		edgeInsert: q(`INSERT INTO KS.edges (item, bucket, user, state, epoch, op, updated_at, eseq, pending, branches)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) IF NOT EXISTS`),
		edgeUpdate: q(`UPDATE KS.edges SET state = ?, epoch = ?, op = ?, updated_at = ?, eseq = ?, pending = ?, branches = ?
			WHERE item = ? AND bucket = ? AND user = ? IF eseq = ? AND epoch = ? AND op = ?`),
		edgeRecord: q(`UPDATE KS.edges SET eseq = ?, pending = ?
			WHERE item = ? AND bucket = ? AND user = ? IF eseq = ? AND epoch = ? AND op = ?`),
		relaySelect: q(`SELECT eseq, nonce, pos, event_time FROM KS.edge_relays WHERE item = ? AND bucket = ? AND user = ?`),
		relayPut: q(`INSERT INTO KS.edge_relays (item, bucket, user, eseq, nonce, pos, event_time) VALUES (?, ?, ?, ?, ?, ?, ?)
			USING TIMESTAMP ?`),
		likersFirst: q(`SELECT user, state FROM KS.edges WHERE item = ? AND bucket = ?`),
		likersAfter: q(`SELECT user, state FROM KS.edges WHERE item = ? AND bucket = ? AND user > ?`),
		itemsFirst:  q(`SELECT DISTINCT item FROM KS.cells LIMIT ?`),
		itemsAfter:  q(`SELECT DISTINCT item FROM KS.cells WHERE token(item) > token(?) LIMIT ?`),
		idemSelect:  q(`SELECT fingerprint, liked, changed, expires_at FROM KS.idem WHERE user = ? AND key = ?`),
		idemInsert: q(`INSERT INTO KS.idem (user, key, fingerprint, liked, changed, expires_at) VALUES (?, ?, ?, ?, ?, ?)
			USING TTL ?`),
		idemPurge:      q(`DELETE FROM KS.idem WHERE user = ?`),
		userItemsAdd:   q(`INSERT INTO KS.user_items (user, item) VALUES (?, ?)`),
		userItems:      q(`SELECT item FROM KS.user_items WHERE user = ? AND item > ? LIMIT ?`),
		userItemsPurge: q(`DELETE FROM KS.user_items WHERE user = ?`),

		erasureInsert: q(`INSERT INTO KS.erasures (user, state, edges, unliked, started_at, finished_at, cursor, remote, late)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		erasureSelect: q(`SELECT user, state, edges, unliked, started_at, finished_at, cursor, remote, late FROM KS.erasures WHERE user = ?`),
		erasureAll:    q(`SELECT user, state, edges, unliked, started_at, finished_at, cursor, remote, late FROM KS.erasures`),
		erasureExists: q(`SELECT user FROM KS.erasures WHERE user = ?`),
		erasureAnnGet: q(`SELECT announced FROM KS.erasures WHERE user = ?`),
		erasureInsertNew: q(`INSERT INTO KS.erasures (user, state, edges, unliked, started_at, finished_at, cursor, remote, late, announced)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, false)`),
		erasureAnnPut: q(`UPDATE KS.erasures SET announced = ? WHERE user = ?`),

		intentInsert: q(`INSERT INTO KS.relay_intents (partition, minute, item, user, eseq, nonce, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)`),
		intentDelete: q(`DELETE FROM KS.relay_intents WHERE partition = ? AND minute = ? AND item = ? AND user = ? AND eseq = ? AND nonce = ?`),
		intentScan:   q(`SELECT item, user, eseq, nonce, created_at FROM KS.relay_intents WHERE partition = ? AND minute = ?`),
		cursorGet:    q(`SELECT minute FROM KS.sweep_cursors WHERE partition = ?`),
		cursorPut:    q(`INSERT INTO KS.sweep_cursors (partition, minute) VALUES (?, ?)`),
		metaSelect:   q(`SELECT created_ms FROM KS.meta WHERE name = ?`),

		outboxInsert: q(`INSERT INTO KS.outbox (partition, chunk, pos, event) VALUES (?, ?, ?, ?)`),
		outboxRange:  q(`SELECT pos, event FROM KS.outbox WHERE partition = ? AND chunk = ? AND pos > ? AND pos <= ?`),

		cellsOfItem: q(`SELECT region, shard, p, n, hwm, watermark FROM KS.cells WHERE item = ? AND kind = 0`),
		cellSelect:  q(`SELECT hwm FROM KS.cells WHERE item = ? AND kind = 0 AND region = ? AND shard = ? AND user = ''`),
		dedupeUpdate: q(`UPDATE KS.cells USING TIMESTAMP ? SET w_epoch = ?, w_op = ?, c_epoch = ?, c_op = ?, d_at = ?
			WHERE item = ? AND kind = 1 AND region = ? AND shard = ? AND user = ?`),
		baseSelect: q(`SELECT kind, user, p, n, hwm, watermark, w_epoch, w_op, c_epoch, c_op, d_at FROM KS.cells
			WHERE item = ? AND (kind, region, shard, user) IN `),
		dedupeSelect: q(`SELECT user, w_epoch, w_op, c_epoch, c_op, d_at FROM KS.cells
			WHERE item = ? AND kind = 1 AND region = ? AND shard = ? AND user IN ?`),
		cellCount:     q(`SELECT SUM(p), SUM(n) FROM KS.cells WHERE item = ? AND kind = 0`),
		positionGet:   q(`SELECT pos, watermark FROM KS.positions WHERE partition = ?`),
		positionPut:   q(`INSERT INTO KS.positions (partition, pos, watermark) VALUES (?, ?, ?)`),
		positionAll:   q(`SELECT partition, watermark FROM KS.positions`),
		watermarksAll: q(`SELECT region, watermark FROM KS.watermarks`),

		remoteCursors:   q(`SELECT stream, pos FROM KS.remote_cursors WHERE region = ?`),
		remoteCursorPut: q(`INSERT INTO KS.remote_cursors (region, stream, pos) VALUES (?, ?, ?) USING TIMESTAMP ?`),
		watermarkPut:    q(`INSERT INTO KS.watermarks (region, watermark) VALUES (?, ?) USING TIMESTAMP ?`),
		cellPut: q(`INSERT INTO KS.cells (item, kind, region, shard, user, p, n, hwm, watermark)
			VALUES (?, 0, ?, ?, '', ?, ?, ?, ?) USING TIMESTAMP ?`),
		cellsOfRegion:  q(`SELECT item, shard, p, n, hwm, watermark FROM KS.cells WHERE kind = 0 AND region = ? ALLOW FILTERING`),
		userItemsAll:   q(`SELECT item FROM KS.user_items WHERE user = ?`),
		userItemDelete: q(`DELETE FROM KS.user_items WHERE user = ? AND item = ?`),

		floorGet:       q(`SELECT through, deleted FROM KS.log_floors WHERE partition = ?`),
		floorPut:       q(`INSERT INTO KS.log_floors (partition, through, last_time) VALUES (?, ?, ?) USING TIMESTAMP ?`),
		floorDeleted:   q(`UPDATE KS.log_floors USING TIMESTAMP ? SET deleted = ? WHERE partition = ?`),
		outboxDropPart: q(`DELETE FROM KS.outbox WHERE partition = ? AND chunk = ?`),
		outboxDropTo:   q(`DELETE FROM KS.outbox WHERE partition = ? AND chunk = ? AND pos <= ?`),
		dedupeScan: q(`SELECT item, shard, user, d_at, WRITETIME(w_op) FROM KS.cells
			WHERE kind = 1 AND region = ? ALLOW FILTERING`),
		dedupeDrop: q(`DELETE FROM KS.cells USING TIMESTAMP ?
			WHERE item = ? AND kind = 1 AND region = ? AND shard = ? AND user = ?`),
		dedupeStamp: q(`UPDATE KS.cells USING TIMESTAMP ? SET d_at = ?
			WHERE item = ? AND kind = 1 AND region = ? AND shard = ? AND user = ?`),
		edgesAll: q(`SELECT item, user, state, epoch, op, updated_at FROM KS.edges`),
		idemAll:  q(`SELECT user, key, fingerprint, liked, changed, expires_at FROM KS.idem`),

		cellGet:       q(`SELECT p, n, hwm, watermark FROM KS.cells WHERE item = ? AND kind = 0 AND region = ? AND shard = ? AND user = ''`),
		rebuildsAll:   q(`SELECT peer FROM KS.rebuilds`),
		rebuildPut:    q(`INSERT INTO KS.rebuilds (peer, marked_ms) VALUES (?, ?)`),
		rebuildDrop:   q(`DELETE FROM KS.rebuilds WHERE peer = ?`),
		identityGet:   q(`SELECT region, created_ms, cluster, data_set, position_base FROM KS.meta WHERE name = 'store'`),
		identityPut:   q(`UPDATE KS.meta SET cluster = ?, data_set = ?, position_base = ? WHERE name = 'store' IF data_set = ?`),
		anyEdge:       q(`SELECT item FROM KS.edges LIMIT 1`),
		anyPeerCursor: q(`SELECT region FROM KS.remote_cursors LIMIT 1`),
	}
}
