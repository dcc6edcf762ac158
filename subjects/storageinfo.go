package subjects

// StorageInfo describes a storage as the registry had it when the prober judged, so the
// deleter — which may not read the registry (least privilege) — can map a spec URI to its data
// and tell whether files are shared. Local overrides (path remaps, delete on/off, dry-run) are
// the deleter's own configuration.
type StorageInfo struct {
	Type            string `json:"type"`                         // KVCM type string: file, hf3fs, vcns_hf3fs, mooncake, pace
	RootPath        string `json:"root_path,omitempty"`          // file: storage_spec.root_path
	Mountpoint      string `json:"mountpoint,omitempty"`         // hf3fs: storage_spec.mountpoint
	RootDir         string `json:"root_dir,omitempty"`           // hf3fs: storage_spec.root_dir
	KeyCountPerFile uint64 `json:"key_count_per_file,omitempty"` // > 1: files are shared by several blocks
}
