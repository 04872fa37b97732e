// Package backupfmt is the stream of one region's online backup, as
// `GET /v1/admin/backup` answers it and `likectl backup --url` reads it: a tar
// of, in this order,
//
//	REGION.json      the region's part of the manifest (Region): name, partitions,
//	                 log heads at or before the checkpoint, creation time
//	LIKES-IDENTITY   the data folder's identity file (absent for a folder from
//	                 before identities)
//	db/<file>        the files of a consistent Pebble checkpoint (no subfolders)
//	END.json         how many db files and bytes came before it (End)
//
// A stream cut short (the server died, a timeout) has no END.json, or one whose
// counts disagree, and Extract refuses it: a partial checkpoint is never taken
// for a backup.
//
// The stream crosses a trust boundary (the network; a region's answer), so
// Extract is strict: regular files only, exactly these names (no path
// separators beyond "db/", no "." or ".."), no duplicates, JSON decoded with
// unknown fields refused and bounded in size, nothing after END.json. It
// writes only below the folder it is given, every file synced.
//
// The package is pure codec and file I/O: no network, no store.
package backupfmt
