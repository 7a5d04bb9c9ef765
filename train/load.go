package train

// LoadModel loads the model of a checkpoint for inference; dir is what
// LoadCheckpointModel accepts (a trainer's or a node's step directory, a
// directory of step directories, or a --home).
func LoadModel(dir string) (*Model, error) {
	cm, err := LoadCheckpointModel(dir)
	if err != nil {
		return nil, err
	}
	return NewModel(cm.Config, cm.Params)
}
