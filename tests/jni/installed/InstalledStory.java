// A program as a user of an installed vkllm builds it: javac -cp PREFIX/share/java/vkllm.jar,
// java -Djava.library.path=PREFIX/lib. Prints the greedy stories260K story (tests/jni/install_test.cmake
// compares it with the published one).
import dev.vkllm.GenerateParams;
import dev.vkllm.Model;
import dev.vkllm.ModelParams;
import dev.vkllm.Session;

import java.io.FileOutputStream;
import java.io.FileDescriptor;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;

public final class InstalledStory {
    public static void main(String[] args) throws IOException {
        // The bytes of each piece as they come, whatever the platform's default charset.
        OutputStream out = new FileOutputStream(FileDescriptor.out);
        try (Model model = Model.load(args[0], new ModelParams().cacheDir(""));
             Session session = model.newSession()) {
            session.generate("", new GenerateParams().temperature(0f).nPredict(200), piece -> {
                try {
                    out.write(piece.getBytes(StandardCharsets.UTF_8));
                } catch (IOException e) {
                    throw new RuntimeException(e);
                }
                return true;
            });
        }
        out.flush();
    }
}
